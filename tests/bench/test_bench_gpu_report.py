"""`make bench-gpu`'s parts that need no GPU: choosing parts with BENCH_ONLY, printing the
table from whatever parts ran, and reading the scheduler's log and status for the part oversub, so
the GPU bench cannot rot unnoticed between GPU runs."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import run_gpu  # noqa: E402

ENVIRONMENT = {"gpu": "Test GPU, 580.0, 81559 MiB, 0 MiB", "torch": "2.11.0", "torch_cuda": "13.0",
               "date": "2026-11-22"}
AB = {"metric": "launches_per_s", "rounds": 3, "median_a": 250000.0, "median_b": 245000.0,
      "ratio_b_over_a": 0.98, "samples_a": [], "samples_b": []}
SWAP = {"fault_h2d_gbps": 8.8, "prefetch_h2d_gbps": 48.3, "prefetch_d2h_gbps": 10.3,
        "pinned_h2d_gbps": 54.2, "on_grant_gbps": 31.3, "on_grant_swap_gbps": None,
        "on_grant_seconds": 0.137, "on_grant_hot_seconds": 0.049, "on_grant_gbps_overlap": 31.9,
        "on_grant_swap_gbps_overlap": 54.0}
MOVES = {"to_host": {"count": 3, "bytes": 29 * 2**30, "seconds": 2.4},
         "to_device": {"count": 3, "bytes": 29 * 2**30, "seconds": 0.7}}
RATES = {"to_host_gbps": 12.9, "to_device_gbps": 44.5, "measured": True}
MOVED = {"to_host": {"count": 3, "bytes_median": 9.5 * 2**30, "bytes_max": 10 * 2**30,
                     "gbps_median": 12.1},
         "to_device": {"count": 3, "bytes_median": 9.5 * 2**30, "bytes_max": 10 * 2**30,
                       "gbps_median": None}}
PROGRAM = {"gib": 16, "passes": 20, "gap_s": 0.0, "ops": 40, "seconds": 14.0,
           "pass_median_s": 0.47, "pass_max_s": 3.1, "mismatched_elements": 0, "intact": True}


def shared(seconds: float, **figures) -> dict:
    return {"seconds": seconds, "intact": True, "programs": [PROGRAM, PROGRAM], "grants": 5,
            "early_releases": 2, "revocations": 0, "moved": MOVED, "moves": MOVES, "move_rates": RATES, **figures}


def table(results: dict, capsys) -> str:
    run_gpu.print_table({"environment": ENVIRONMENT, **results})
    return capsys.readouterr().out


def test_every_part_prints(capsys):
    out = table({"launch_rate": AB, "train_steps": {**AB, "metric": "steps_per_s",
                                                    "median_a": 134.0, "median_b": 133.0},
                 "swapin": SWAP,
                 "interactive": {"libnvs_tq5": {"burst_median_s": 3.3, "burst_max_s": 4.0,
                                                "trainer_steps_per_s": 128.2,
                                                "trainer_outlived_user": False}},
                 "two_jobs_s": {"one_after_another": 43.6}}, capsys)
    assert "launch_rate (ns per launch)" in out and "+81.6 ns added" in out
    assert "swap on_grant_swap_gbps" in out and "n/a" in out  # the hot runs were not faster
    assert "(100% of pinned)" in out  # the overlap figure against pinned memcpy
    assert "(96% of alone)" in out and "TRAINER ENDED FIRST" in out
    assert "two 1500-step jobs, one_after_another: 43.6 s" in out


def test_a_part_alone_prints_without_the_others(capsys):
    out = table({"swapin": {**SWAP, "on_grant_swap_gbps": 48.6}}, capsys)
    assert "swap on_grant_swap_gbps" in out and "90% of pinned" in out
    assert "launch_rate" not in out and "interactive" not in out


def test_bench_only_takes_known_parts(monkeypatch):
    monkeypatch.setenv("BENCH_ONLY", " swapin, launch_rate ")
    assert run_gpu.chosen_parts() == {"swapin", "launch_rate"}
    monkeypatch.setenv("BENCH_ONLY", "oversub")
    assert run_gpu.chosen_parts() == {"oversub"}
    monkeypatch.delenv("BENCH_ONLY")
    assert run_gpu.chosen_parts() == set(run_gpu.PARTS)


def test_an_unknown_part_stops_before_anything_runs():
    env = {**os.environ, "BENCH_ONLY": "swapin,warp_speed"}
    done = subprocess.run([sys.executable, str(REPO / "bench" / "run_gpu.py")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "warp_speed" in done.stderr and "launch_rate" in done.stderr


@pytest.mark.parametrize("part, variable", [("mps", "MPS_SETUPS"),
                                             ("classroom", "CLASSROOM_SETUPS")])
def test_a_parts_bad_setups_stop_the_bench_before_anything_runs(part, variable):
    env = {**os.environ, "BENCH_ONLY": part, variable: "auto_mps,warp"}
    done = subprocess.run([sys.executable, str(REPO / "bench" / "run_gpu.py")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and variable in done.stderr, done.stderr


def test_oversub_prints_every_scenario_and_mode(capsys):
    plain = {"seconds": 28.0, "intact": True, "programs": [PROGRAM, PROGRAM]}
    # The status may lack `moves`, and a run may fail: neither stops the table.
    lacking = shared(35.0, moves=None, move_rates=None, intact=False)
    failed = {"error": "RuntimeError: python3 oversub_pass.py exited 1:\nTraceback\nOOM"}
    part = {"gib": 16, "passes": 20, "capacity_mib": 24576, "tq": 10, "start_gap_s": 1.0,
            "scenarios": {
                "oversubscribed pair": {"gap_s": 0.0, "one_after_another": plain,
                                        "together_on": shared(30.8), "ratio_on": 1.1,
                                        "together_auto": lacking, "ratio_auto": 1.25},
                "oversubscribed pair, half busy": {"gap_s": 0.5, "one_after_another": failed,
                                                   "together_on": shared(50.0),
                                                   "ratio_on": None, "together_auto": failed,
                                                   "ratio_auto": None},
                "oversubscribed pair, 1 s gaps": {"gap_s": 1.0, "ops": 16, "target": 0.8,
                                                  "one_after_another": plain,
                                                  "together_on": shared(17.4, gap_grants=14),
                                                  "ratio_on": 0.62,
                                                  "together_auto": shared(24.6, gap_grants=3),
                                                  "ratio_auto": 0.88}}}
    out = table({"oversub": part}, capsys)
    assert "2 x 16 GiB, 20 passes each, scheduler capacity 24576 MiB, TQ 10 s" in out
    assert "oversubscribed pair, one after another, no layer: 28.0 s; intact" in out
    assert ("oversubscribed pair, together, on: 30.8 s (1.10 of one after another); 5 grants "
            "(2 after early releases, 0 in the other's idle gaps), 0 revocations; per handoff "
            "(median/max) out 3 x 9.50/10.00 GiB at 12.1 GB/s, "
            "back 3 x 9.50/10.00 GiB rate n/a; status: 29.00 GiB out in 2.4 s, 29.00 GiB "
            "back in 0.7 s, rates 12.9 out / 44.5 back GB/s (measured); intact") in out
    assert ("oversubscribed pair, together, auto: 35.0 s (1.25 of one after another)" in out
            and "status: moves n/a; DATA NOT INTACT" in out)
    assert ("oversubscribed pair, half busy, one after another, no layer: FAILED (RuntimeError: "
            "python3 oversub_pass.py exited 1: ... OOM)") in out
    assert "oversubscribed pair, half busy, together, on: 50.0 s; 5 grants" in out
    assert ("oversubscribed pair, 1 s gaps, together, on: 17.4 s (0.62 of one after another, "
            "target <= 0.8: met); 5 grants (2 after early releases, 14 in the other's idle gaps)"
            ) in out
    assert "1 s gaps, together, auto: 24.6 s (0.88 of one after another, target <= 0.8: MISSED)" \
        in out


def test_oversub_refuses_gaps_no_scenario_has(monkeypatch, tmp_path):
    monkeypatch.setenv("OVERSUB_GAPS", "1,0.3")
    result = run_gpu.oversub.measure(sys.executable, tmp_path / "libnvs.so", tmp_path)
    assert result["skipped"] == ("OVERSUB_GAPS names 0.3, which no scenario has (the scenarios' "
                                 "gaps: 0, 0.2, 0.5, 1)")
    assert not any(tmp_path.iterdir())  # nothing ran


def test_oversub_skipped_says_why(capsys):
    reason = run_gpu.oversub.refusal(16, [81559, 40000])
    assert "40000 MiB free" in reason and run_gpu.oversub.refusal(16, [81559]) is None
    out = table({"oversub": {"gib": 16, "skipped": reason}}, capsys)
    assert "oversub: skipped (the pair needs 2 x 16 GiB" in out


def test_oversub_reads_the_scheduler_log_and_status():
    log = "\n".join([
        "2026-11-22 10:00:00.000 INFO grant client 1 (pid 10, python3): device 0",
        "2026-11-22 10:00:10.000 INFO grant client 2 (pid 11, python3): device 0, after waiting "
        "0.100 s, in the idle gap of client 1 (pid 10, python3)",
        "2026-11-22 10:00:20.000 INFO revoke client 2 (pid 11, python3): device 0, no release",
        "2026-11-22 10:00:09.950 INFO release client 1 (pid 10, python3): device 0 early (idle), "
        "held 9.950 s",
        "2026-11-22 10:00:09.900 INFO moved client 1 (pid 10, python3): device 0, "
        "9663676416 bytes to the host in 0.812 s (11.9 GB/s)",
        "2026-11-22 10:00:19.900 INFO moved client 2 (pid 11, a: b): device 0, "
        "10737418240 bytes to the host in 1.000 s (10.7 GB/s), cut short: the driver refused",
        "2026-11-22 10:00:20.100 INFO moved client 1 (pid 10, python3): device 0, "
        "1048576 bytes to the device in 0.001 s (1.0 GB/s)"])
    figures = run_gpu.oversub.log_figures(log)
    assert (figures["grants"], figures["early_releases"], figures["revocations"],
            figures["gap_grants"]) == (2, 1, 1, 1)
    out = figures["moved"]["to_host"]
    assert out["count"] == 2 and out["bytes_max"] == 10737418240
    assert abs(out["gbps_median"] - (9663676416 / 0.812 + 10737418240) / 2e9) < 1e-9
    # A 1 MiB move says nothing about the link: counted, but no rate.
    assert figures["moved"]["to_device"] == {"count": 1, "bytes_median": 1048576,
                                             "bytes_max": 1048576, "gbps_median": None}
    status = {"devices": [{"index": 0}, {"index": 1, "moves": MOVES, "move_rates": RATES}]}
    assert run_gpu.oversub.device_moves(status) == {"moves": MOVES, "move_rates": RATES}
    for lacking in (None, {}, {"devices": [{"index": 0}]}, {"devices": [{"moves": "odd"}]}):
        assert run_gpu.oversub.device_moves(lacking)["move_rates"] is None


def test_notebooks_says_how_long_evictions_took_to_answer():
    """From each EVICT to its MOVED to the host: staging memory's preparation counts, which the
    move's own time leaves out; moves to the device and an EVICT never answered do not."""
    log = "\n".join([
        "2026-11-28 10:25:15.803 INFO evict client 2 (pid 600, python3): device 0, 5126 MiB to "
        "the host to make room for client 4 (pid 603, python3)",
        "2026-11-28 10:25:15.900 INFO evict client 3 (pid 601, python3): device 0, 10 MiB to "
        "the host to make room for client 4 (pid 603, python3)",
        "2026-11-28 10:25:16.000 INFO moved client 3 (pid 601, python3): device 0, 10485760 "
        "bytes to the device in 0.001 s",
        "2026-11-28 10:25:16.103 INFO moved client 3 (pid 601, python3): device 0, 10485760 "
        "bytes to the host in 0.001 s",
        "2026-11-28 10:25:23.196 INFO moved client 2 (pid 600, python3): device 0, 5375000576 "
        "bytes to the host in 0.104 s (51.9 GB/s)",
        "2026-11-28 10:25:24.000 INFO evict client 1 (pid 599, python3): device 0, 1 MiB to the "
        "host to make room for client 4 (pid 603, python3)"])
    answers = run_gpu.notebooks.evictions(log)
    assert answers["count"] == 2
    assert abs(answers["longest_s"] - 7.393) < 1e-6 and abs(answers["median_s"] - 3.798) < 1e-6
    run = {**shared(60.0), "cell_median_s": 0.3, "cell_p95_s": 0.5, "cell_max_s": 0.9,
           "first_cell_max_s": 2.0, "evictions": answers}
    line = run_gpu.notebooks.run_line("notebooks 4 x 12 GiB, on", run)
    assert "2 EVICTs answered in 3.798 s median, 7.39 s at most" in line
    assert run_gpu.notebooks.evictions("")["longest_s"] is None


def test_notebooks_judge_each_programs_first_move_out_by_how_long_after_its_allocation():
    """The eleventh GPU run's moves: a program's first move out 0.7 s after its allocation (the
    start rush: 3.1 GB/s) counts only as one that came sooner; those 3 s or more after count,
    and one of them under 20 GB/s is slow; moves under 256 MiB and moves in are not a first
    move out."""
    log = "\n".join([
        "2026-12-04 01:31:53.417 INFO moved client 4 (pid 651, python3): device 0, 5375000576 "
        "bytes to the host in 1.754 s (3.1 GB/s)",
        "2026-12-04 01:31:53.534 INFO moved client 4 (pid 651, python3): device 0, 815792128 "
        "bytes to the host in 0.016 s (51.6 GB/s)",
        "2026-12-04 01:31:54.000 INFO moved client 2 (pid 653, python3): device 0, 104857600 "
        "bytes to the host in 0.050 s (2.1 GB/s)",
        "2026-12-04 01:31:54.500 INFO moved client 2 (pid 653, python3): device 0, 5375000576 "
        "bytes to the device in 0.139 s (38.8 GB/s)",
        "2026-12-04 01:31:55.154 INFO moved client 2 (pid 653, python3): device 0, 5375000576 "
        "bytes to the host in 0.103 s (52.4 GB/s)",
        "2026-12-04 01:31:58.680 INFO moved client 1 (pid 650, python3): device 0, 2686451712 "
        "bytes to the host in 0.500 s (5.4 GB/s)"])

    def at(seconds: float) -> float:
        return datetime(2026, 12, 4, 1, 31, 0).timestamp() + seconds

    programs = [{"pid": 651, "allocated_at": at(50.93)}, {"pid": 653, "allocated_at": at(51.60)},
                {"pid": 650, "allocated_at": at(51.33)}, {"pid": 652, "allocated_at": at(51.4)}]
    first = run_gpu.notebooks.first_moves(programs, log)
    assert first == {"count": 2, "slow": 1, "sooner": 1,
                     "slowest_gb_per_s": pytest.approx(5.373, abs=1e-3)}
    run = {**shared(60.0), "cell_median_s": 0.3, "cell_p95_s": 0.5, "cell_max_s": 0.9,
           "first_cell_max_s": 2.0, "first_moves": first}
    line = run_gpu.notebooks.run_line("notebooks 4 x 12 GiB, on", run)
    assert ("first moves out 3 s or more after the allocation: 2, 1 under 20 GB/s, the slowest "
            "at 5.4 (1 sooner)") in line
    assert run_gpu.notebooks.first_moves(programs, "")["slow"] == 0


def test_multi_gpu_is_skipped_with_its_reason_where_fewer_than_two_gpus_are_seen(tmp_path,
                                                                                monkeypatch):
    import multi_gpu
    monkeypatch.setattr(multi_gpu, "gpu_count", lambda: 1)
    result = multi_gpu.measure(sys.executable, tmp_path / "libnvs.so", tmp_path)
    assert result == {"skipped": "needs two GPUs; nvidia-smi lists 1"}
    assert not any(tmp_path.iterdir())  # nothing ran


def test_multi_gpu_prints_both_scenarios_and_errors(capsys):
    part = {"apart": {"alone_steps_per_s": [40.0, 41.0], "together_steps_per_s": [39.5, 40.0],
                      "ratios": [0.9875, 0.9756], "grants": 2, "drops": 0, "revocations": 0,
                      "early_releases": 0},
            "ddp_pair": {"error": "RuntimeError: torchrun exited 1"}}
    out = table({"multi_gpu": part}, capsys)
    assert "two programs on two GPUs, together / alone: 0.988, 0.976" in out
    assert "multi_gpu ddp_pair: RuntimeError: torchrun exited 1" in out
    part["ddp_pair"] = {"one_after_another_s": 60.0, "together_s": 66.0, "throughput_ratio": 0.909,
                        "ranks_agree": True, "gang_grants": 7, "grants": 28, "drops": 26,
                        "revocations": 0, "early_releases": 0}
    out = table({"multi_gpu": part}, capsys)
    assert ("two 2-rank DDP jobs on two GPUs: one after the other 60.0 s, together 66.0 s "
            "(throughput 0.91x), 7 gang grants, 0 revocations") in out
    assert "skipped (needs two GPUs" in table({"multi_gpu": {"skipped": "needs two GPUs"}}, capsys)


def test_notebooks_count_every_cell_and_how_long_allocations_waited_beside_no_layer():
    """A program's first cell is one its user waits for: the `every_cell_*` figures count it, and
    a slow first cell shows there even where the timetabled cells are all quick."""
    programs = [{"allocation_s": 0.4, "first_cell_s": 2.5, "cells_s": [0.3, 0.3, 0.35],
                 "seconds_from_go": 9.0},
                {"allocation_s": 4.9, "first_cell_s": 0.2, "cells_s": [0.3, 0.31, 0.3],
                 "seconds_from_go": 9.3}]
    figures = run_gpu.notebooks.cell_figures(programs)
    assert figures["cell_max_s"] == 0.35 and figures["every_cell_max_s"] == 2.5
    assert figures["every_cell_median_s"] == 0.3 and figures["allocation_max_s"] == 4.9
    plain = run_gpu.notebooks.cell_figures([{**program, "allocation_s": 0.5,
                                              "seconds_from_go": 9.0} for program in programs])
    shared_run = run_gpu.notebooks.against_no_layer({**figures, "intact": True}, plain)
    assert shared_run["allocation_wait_max_s"] == pytest.approx(4.4)
    assert shared_run["ratio_to_no_layer"] == pytest.approx(9.3 / 9.0)
    failed = {"error": "RuntimeError: a program did not get ready"}
    assert run_gpu.notebooks.against_no_layer(figures, failed) == figures
