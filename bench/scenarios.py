"""The scenarios every change must keep, each named once: what its programs do, the bounds it is
held to, the fake-driver test that holds it in CI and the `make bench-gpu` part that measures it
on a GPU, with the result keys each bound reads.

Pure data and lookups, importing nothing of the bench: bench/run_gpu.py, bench/scenario_table.py
and the tests all read it. tests/bench/test_scenario_registry.py checks that every test named
here exists, every part is one of bench/run_gpu.py's, and every key is one its part writes.

A bound's keys are paths into that part's result (`results[part]`); "*" stands for every key at
its level (every set, every scenario). Where a bound reads several figures the worst counts: the
largest for "<=", the smallest for ">=", and for "is" every one must be the value.
"""

from __future__ import annotations

from dataclasses import dataclass

COMPARISONS = ("<=", ">=", "is")


@dataclass(frozen=True)
class Bound:
    name: str  # what is measured, as the table shows it
    comparison: str  # one of COMPARISONS
    value: float | bool
    unit: str  # of the figure and the value: "x" (a ratio), "s", "" ...
    part: str  # the bench/run_gpu.py part that measures it
    keys: tuple[tuple[str, ...], ...]  # paths into results[part]

    def met(self, figure) -> bool | None:
        """Whether the figure keeps the bound; None without a figure."""
        if figure is None:
            return None
        if self.comparison == "is":
            return figure is self.value
        return figure <= self.value if self.comparison == "<=" else figure >= self.value


@dataclass(frozen=True)
class Scenario:
    name: str
    programs: str  # one line: what runs
    bounds: tuple[Bound, ...]
    fake_tests: tuple[str, ...]  # pytest node ids, run in CI on the fake driver
    gpus: int = 1  # GPUs its bench part needs; the part skips, saying so, with fewer

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(bound.part for bound in self.bounds))


def bound(name: str, comparison: str, value, unit: str, part: str, *keys: tuple) -> Bound:
    return Bound(name, comparison, value, unit, part, tuple(keys))


LIBNVS = "tests/libnvs/"
CLASSROOM_TESTS = "tests/libnvs/test_classroom.py"
OVERSUB_TQ_S = 10  # bench/oversub.py's TQ: no pass may wait longer than a quantum and 2 s
NOTEBOOKS_ALLOCATION_WAIT_S = 1.0


def classroom(arrangement: str, setup: str, burst_ratio: float, trainer_share: float) -> tuple:
    """The classroom part's bounds for one arrangement (in or out of step) and one setup."""
    return (bound("worst notebook's burst median / alone", "<=", burst_ratio, "x", "classroom",
                  (arrangement, setup, "burst_ratio")),
            bound("trainer / alone", ">=", trainer_share, "x", "classroom",
                  (arrangement, setup, "trainer_share")),
            bound("every burst ended", "is", True, "", "classroom",
                  (arrangement, setup, "complete")))


def oversub(scenario: str, ratio: float) -> tuple:
    """One bench/oversub.py scenario's bounds, in both modes."""
    bounds = []
    for mode in ("on", "auto"):
        bounds += [bound(f"{mode}: together / one after the other", "<=", ratio, "x", "oversub",
                         ("scenarios", scenario, f"ratio_{mode}")),
                   bound(f"{mode}: longest pass", "<=", OVERSUB_TQ_S + 2, "s", "oversub",
                         ("scenarios", scenario, f"together_{mode}", "pass_max_s"))]
    return tuple(bounds)


def notebooks(name: str, median_s: float) -> tuple:
    """One bench/notebooks.py set's bounds, in both modes; every cell counts, first ones too."""
    bounds = []
    for mode in ("on", "auto"):
        run = ("sets", name, mode)
        bounds += [bound(f"{mode}: cell median", "<=", median_s, "s", "notebooks",
                         (*run, "every_cell_median_s")),
                   bound(f"{mode}: slowest cell", "<=", 1.5, "s", "notebooks",
                         (*run, "every_cell_max_s")),
                   bound(f"{mode}: all done / no layer", "<=", 1.1, "x", "notebooks",
                         (*run, "ratio_to_no_layer")),
                   bound(f"{mode}: allocation's wait beyond no layer", "<=",
                         NOTEBOOKS_ALLOCATION_WAIT_S, "s", "notebooks",
                         (*run, "allocation_wait_max_s"))]
    return tuple(bounds)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "overhead",
        "empty-kernel launches, and a small MLP's training steps, under libnvs alone against plain",
        (bound("launches/s, libnvs / plain", ">=", 0.98, "x", "launch_rate",
               ("ratio_b_over_a",)),
         bound("training steps/s, libnvs / plain", ">=", 0.98, "x", "train_steps",
               ("ratio_b_over_a",))),
        (LIBNVS + "test_hot_path_syscalls.py::"
         "test_launches_while_holding_the_lock_make_no_system_call",)),
    Scenario(
        "burst beside a trainer",
        "one user's 0.43 s bursts 2 s apart beside a trainer that never pauses, `on`, TQ 30",
        (bound("burst median / alone", "<=", 1.3, "x", "beside_trainer",
               ("summary", "on", "burst_ratio")),
         bound("trainer / alone", ">=", 0.75, "x", "beside_trainer",
               ("summary", "on", "trainer_share")),
         bound("every burst ended", "is", True, "", "beside_trainer",
               ("summary", "on", "complete"))),
        (LIBNVS + "test_shares_end_to_end.py::"
         "test_bursts_wait_little_and_the_busy_program_keeps_most_of_the_gpu",)),
    Scenario(
        "classroom in step, on",
        "six notebooks, a burst each every 4 s at the same moments, beside a trainer; `on`, TQ 5",
        classroom("in_step", "on", 1.5, 0.5),
        (CLASSROOM_TESTS + "::test_classroom_in_step_on",)),
    Scenario(
        "classroom in step, auto --mps",
        "the same under `auto --mps`, a config rule giving the trainer mps_priority = \"low\"",
        classroom("in_step", "auto_mps_low", 1.5, 0.6),
        (CLASSROOM_TESTS + "::test_classroom_in_step_auto",)),
    Scenario(
        "classroom out of step, on",
        "six notebooks, a burst each every 4 s, their moments spread over the 4 s, beside a "
        "trainer; `on`, TQ 5",
        classroom("out_of_step", "on", 1.5, 0.5),
        (CLASSROOM_TESTS + "::test_classroom_out_of_step[on]",
         CLASSROOM_TESTS + "::test_classroom_in_threes_on")),
    Scenario(
        "classroom out of step, auto --mps",
        "the same under `auto --mps`, a config rule giving the trainer mps_priority = \"low\"",
        classroom("out_of_step", "auto_mps_low", 1.5, 0.6),
        (CLASSROOM_TESTS + "::test_classroom_out_of_step[auto]",)),
    Scenario(
        "inference loops through MPS",
        "four small inference loops (12 conv layers, batch 4, fp16) at once, `auto --mps` "
        "against MPS alone",
        (bound("requests/s, auto --mps / MPS alone", ">=", 0.95, "x", "mps",
               ("loops", "auto_mps_over_mps")),),
        (LIBNVS + "test_mps.py::"
         "test_through_mps_programs_that_fit_run_at_once_and_those_that_do_not_take_turns",)),
    Scenario(
        "oversubscribed pair, compute-bound",
        "two programs of 16 GiB under --capacity-mib 24576, back-to-back passes over all their "
        "memory, TQ 10",
        oversub("oversubscribed pair", 1.0),
        (LIBNVS + "test_oversubscribed_turns.py::"
         "test_handoffs_move_only_the_room_needed_and_bring_it_back",)),
    Scenario(
        "oversubscribed pair, 0.2 s gaps",
        "the same pair, 0.18 s passes each after 0.2 s of CPU time: gaps too short to lend",
        oversub("oversubscribed pair, 0.2 s gaps", 1.0),
        (LIBNVS + "test_idle_gaps.py::"
         "test_a_pair_keeps_its_turns_when_moves_cost_more_than_a_gap",)),
    Scenario(
        "oversubscribed pair, 1 s gaps",
        "the same pair, 0.18 s passes each after 1 s of CPU time: gaps worth lending",
        oversub("oversubscribed pair, 1 s gaps", 0.8),
        (LIBNVS + "test_idle_gaps.py::"
         "test_a_pair_fills_each_others_gaps_when_moves_cost_less_than_a_gap",)),
    Scenario(
        "notebooks 4 x 12 GiB",
        "four programs of 12 GiB under --capacity-mib 32768, a cell every 3 s over all their "
        "memory, 16 cells, TQ 10",
        notebooks("4x12", 0.45),
        (LIBNVS + "test_notebooks.py::test_every_cell_stays_close_to_its_time_alone[on]",
         LIBNVS + "test_notebooks.py::test_every_cell_stays_close_to_its_time_alone[auto]")),
    Scenario(
        "notebooks 8 x 6 GiB",
        "eight programs of 6 GiB, the same capacity, cells and period",
        notebooks("8x6", 0.25),
        (LIBNVS + "test_notebooks.py::test_every_cell_stays_close_to_its_time_alone[on]",
         LIBNVS + "test_notebooks.py::test_every_cell_stays_close_to_its_time_alone[auto]",
         LIBNVS + "test_notebooks.py::test_no_two_programs_bring_their_memory_back_at_once")),
    Scenario(
        "a first move out, staging prepared from the allocation on",
        "each notebook program's first move out of 256 MiB or more that came 3 s or more after "
        "its allocation ended, both sets, both modes",
        (bound("those under 20 GB/s", "<=", 0, "", "notebooks",
               ("sets", "*", "on", "first_moves", "slow"),
               ("sets", "*", "auto", "first_moves", "slow")),),
        (LIBNVS + "test_staging_host_memory.py::"
         "test_a_first_move_out_finds_staging_memory_prepared_since_the_allocation",)),
    Scenario(
        "two programs on two GPUs",
        "one matmul loop on each of two GPUs, under libnvs against each alone",
        (bound("each program together / alone", ">=", 0.95, "x", "multi_gpu",
               ("apart", "ratios", "*")),),
        (LIBNVS + "test_devices.py::test_processes_on_different_devices_run_at_once",),
        gpus=2),
    Scenario(
        "DDP gangs",
        "two 2-rank torchrun DDP jobs sharing two GPUs, each a gang",
        (bound("throughput, together / one after the other", ">=", 0.8, "x", "multi_gpu",
               ("ddp_pair", "throughput_ratio")),
         bound("revocations", "<=", 0, "", "multi_gpu", ("ddp_pair", "revocations")),
         bound("both ranks' weights agree", "is", True, "", "multi_gpu",
               ("ddp_pair", "ranks_agree"))),
        (LIBNVS + "test_gangs.py::test_a_gang_and_a_process_on_its_devices_take_whole_turns",
         LIBNVS + "test_gangs.py::test_a_member_that_dies_frees_every_lock_of_its_gang_at_once"),
        gpus=2),
    Scenario(
        "frameworks' results unchanged",
        "every element of the oversubscribed pairs' and the notebooks' memory checked after "
        "every move",
        (bound("oversubscribed pairs' elements intact", "is", True, "", "oversub",
               ("scenarios", "*", "together_on", "intact"),
               ("scenarios", "*", "together_auto", "intact")),
         bound("notebooks' elements intact", "is", True, "", "notebooks",
               ("sets", "*", "on", "intact"), ("sets", "*", "auto", "intact"))),
        (LIBNVS + "test_move_by_copy.py::"
         "test_many_handoffs_with_the_real_scheduler_keep_every_byte",)),
    Scenario(
        "llm_servers",
        "two Llama-architecture servers (3B, bf16, random weights), each sizing its KV cache "
        "to 90% of a 32 GiB card, serving requests alternately after idle spans of 5-15 s, "
        "under --capacity-mib 32768, `on`, TQ 30; fitting together: `auto` under twice that",
        (bound("time to first token after an idle span, p50", "<=", 1.0, "s", "llm_servers",
               ("shared", "ttft_p50_s")),
         bound("time to first token after an idle span, p99", "<=", 1.5, "s", "llm_servers",
               ("shared", "ttft_p99_s")),
         bound("time per output token / alone", "<=", 1.05, "x", "llm_servers",
               ("shared", "tpot_ratio")),
         bound("fitting together: time to first token / alone", "<=", 1.05, "x",
               "llm_servers", ("together", "ttft_ratio")),
         bound("every token as the server alone", "is", True, "", "llm_servers",
               ("shared", "tokens_match"), ("together", "tokens_match"))),
        (LIBNVS + "test_llm_servers.py::"
         "test_a_request_after_an_idle_span_waits_only_for_the_memory_it_touched",)),
    Scenario(
        "under a memory limit",
        "two notebooks of 4 GiB taking turns (`on`), in a memory cgroup limited to what they "
        "took with no staging and a quarter more, with staging",
        (bound("programs the OOM killer took", "<=", 0, "", "memory_limit", ("oom_kills",)),
         bound("all done, staging / none", "<=", 1.1, "x", "memory_limit",
               ("ratio_to_without",)),
         bound("every element intact", "is", True, "", "memory_limit", ("intact",))),
        (LIBNVS + "test_staging_host_memory.py::"
         "test_programs_that_fit_a_memory_limit_without_staging_fit_it_with_staging",
         LIBNVS + "test_staging_host_memory.py::"
         "test_the_empty_blocks_of_a_pool_in_use_go_back_once_other_programs_eat_into_the_floor")),
)

# What each `make bench-gpu BENCH_SET=N` runs on one GPU, and the part settings the registry's
# figures are measured with (the caller's environment wins). Each set is sized to end within
# nine minutes on an H200 (PART_SECONDS below).
SETS: dict[int, dict] = {
    # The notebooks' length is the least certain (their first moves): their set has the room.
    1: {"parts": ("notebooks", "beside_trainer"),
        "env": {"NOTEBOOKS_SETS": "4x12,8x6", "NOTEBOOKS_CELLS": "16", "NOTEBOOKS_PERIOD_S": "3",
                "BESIDE_MODES": "on", "BESIDE_ROUNDS": "1"}},
    2: {"parts": ("oversub", "classroom", "mps", "memory_limit"),
        "env": {"OVERSUB_GAPS": "0,0.2,1", "OVERSUB_PASSES": "12",
                "CLASSROOM_SETUPS": "on,auto_mps_low",
                "MPS_ONLY": "loops", "MPS_SETUPS": "mps,auto_mps", "MPS_SECONDS": "5",
                # Three windows each way, interleaved: one of 5 s each gave 0.937x, 0.992x
                # and 1.11x in three runs of an unchanged launch path.
                "MPS_ROUNDS": "3"}},
    # Inference servers, whose start-ups (each run starts the servers afresh) are the least
    # certain part, and the overhead's A/B rounds.
    3: {"parts": ("llm_servers", "launch_rate", "train_steps"),
        "env": {"LLM_SERVERS": "2", "LLM_PARAMS_B": "3", "LLM_CARD_MIB": "32768",
                "LLM_REQUESTS": "5", "LLM_IDLE_S": "5,15", "BENCH_ROUNDS": "3"}},
}
# Seconds of each part with the settings above, on one H200, as the third run of 2026-12-02
# took them (docs/benchmarks.md; a run's JSON has the real ones, `part_seconds`).
PART_SECONDS = {"notebooks": 356, "beside_trainer": 90, "mps": 67, "launch_rate": 73,
                "train_steps": 76, "oversub": 194, "classroom": 171, "llm_servers": 360,
                "memory_limit": 31}  # memory_limit: its own run on 2026-12-02 (seventh)
# mps: three rounds of the 22 s one round took on 2026-12-04; llm_servers: its 294 s then and
# the alone run once more (the first alone run and its start-up, about 65 s).
SET_LIMIT_S = 540  # under nine minutes, a lent machine's command each


def by_name(name: str) -> Scenario:
    for scenario in SCENARIOS:
        if scenario.name == name:
            return scenario
    raise KeyError(f"no scenario named {name!r}")


def sets_of(scenario: Scenario) -> tuple[int, ...]:
    """The BENCH_SET numbers whose parts measure the scenario; none for one that needs more
    GPUs than one (its part runs with BENCH_ONLY on such a machine)."""
    return tuple(number for number, chosen in sorted(SETS.items())
                 if set(scenario.parts) & set(chosen["parts"]))


def set_settings(which: str) -> dict:
    """The environment `BENCH_SET=which` stands for: "1", "2", "3" or "all" (every one, one
    after the other); BENCH_ONLY names its parts. A clear error for anything else."""
    chosen = sorted(SETS) if which == "all" else [int(which)] if which.isdigit() else []
    if not chosen or any(number not in SETS for number in chosen):
        raise ValueError(f"BENCH_SET is {which!r}; choose from "
                         f"{', '.join(map(str, sorted(SETS)))} or all")
    env: dict = {}
    parts: list = []
    for number in chosen:
        env.update(SETS[number]["env"])
        parts += SETS[number]["parts"]
    return {**env, "BENCH_ONLY": ",".join(parts)}


def figures(bound_: Bound, results: dict) -> list:
    """Every figure a bound reads from a bench-gpu result (`results[part]`), missing ones left
    out; "*" in a key walks every entry at its level."""
    found = []

    def walk(value, path):
        if not path:
            found.append(value)
            return
        head, rest = path[0], path[1:]
        if head == "*":
            entries = value.values() if isinstance(value, dict) else \
                value if isinstance(value, list) else []
            for entry in entries:
                walk(entry, rest)
        elif isinstance(value, dict) and head in value:
            walk(value[head], rest)

    part = results.get(bound_.part)
    if isinstance(part, dict):
        for key in bound_.keys:
            walk(part, key)
    return [value for value in found if value is not None]


def worst(bound_: Bound, values: list):
    """The one figure a bound is judged by: the worst of those it read; None if none."""
    if not values:
        return None
    if bound_.comparison == "is":
        return next((value for value in values if value is not bound_.value), values[0])
    return max(values) if bound_.comparison == "<=" else min(values)
