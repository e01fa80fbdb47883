"""The scenario registry (bench/scenarios.py) holds together: names are unique, every fake-driver
test it names exists, every GPU part it names is one of bench/run_gpu.py's and writes every key
its bounds read (the parts run through their own code with stand-ins, tests/bench/part_runs.py),
`make bench-gpu`'s sets measure every scenario one GPU can, each within its time, and the
table judges a figure by its bound."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import run_gpu  # noqa: E402
import scenario_table  # noqa: E402
import scenarios  # noqa: E402
from part_runs import RUNS, run_part  # noqa: E402

NODE_IDS = sorted({test for scenario in scenarios.SCENARIOS for test in scenario.fake_tests})
BOUNDS = [(scenario.name, bound) for scenario in scenarios.SCENARIOS for bound in scenario.bounds]


def test_every_scenario_and_every_bound_of_one_is_named_once():
    names = [scenario.name for scenario in scenarios.SCENARIOS]
    assert len(names) == len(set(names)), names
    for scenario in scenarios.SCENARIOS:
        bounds = [bound.name for bound in scenario.bounds]
        assert len(bounds) == len(set(bounds)), scenario
        assert scenario.programs and scenario.fake_tests and scenario.bounds, scenario
        assert all(bound.comparison in scenarios.COMPARISONS for bound in scenario.bounds)


@pytest.fixture(scope="module")
def collected() -> set[str]:
    """The node ids pytest collects from every file the registry names."""
    files = sorted({node.split("::")[0] for node in NODE_IDS if (REPO / node.split("::")[0])
                    .exists()})
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", *files], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {line.strip() for line in done.stdout.splitlines() if "::" in line}


@pytest.mark.parametrize("node", NODE_IDS)
def test_every_fake_driver_test_named_exists(collected, node):
    assert node in collected, f"{node} is not a test pytest collects"


def test_every_part_named_is_one_of_bench_gpus_and_every_set_names_known_parts():
    for _, bound in BOUNDS:
        assert bound.part in run_gpu.PARTS, bound
    for number, chosen in scenarios.SETS.items():
        assert set(chosen["parts"]) <= set(run_gpu.PARTS), number
    assert set(RUNS) == {bound.part for _, bound in BOUNDS}  # each part is run below


def test_a_bound_made_from_a_parts_setting_agrees_with_it():
    assert scenarios.OVERSUB_TQ_S == run_gpu.oversub.TQ


def test_bench_gpu_in_its_commands_measures_every_scenario_one_gpu_can_each_in_its_time():
    for scenario in scenarios.SCENARIOS:
        assert bool(scenarios.sets_of(scenario)) == (scenario.gpus == 1), scenario.name
    for number, chosen in scenarios.SETS.items():
        total = sum(scenarios.PART_SECONDS[part] for part in chosen["parts"])
        assert total <= scenarios.SET_LIMIT_S, (number, total)
    parts = [part for chosen in scenarios.SETS.values() for part in chosen["parts"]]
    assert len(parts) == len(set(parts))  # no part runs twice


@pytest.fixture(scope="module")
def measured():
    """Every part's result, made by its own code with stand-in programs."""
    directory = Path(tempfile.mkdtemp(prefix="gs-", dir="/tmp"))  # sockets need short paths
    try:
        yield {part: run_part(part, directory / part) for part in RUNS}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("scenario, bound", BOUNDS, ids=[f"{s}: {b.name}" for s, b in BOUNDS])
def test_every_bound_reads_a_figure_its_part_writes(measured, scenario, bound):
    found = scenarios.figures(bound, measured)
    assert found, (bound, measured[bound.part])
    wanted = bool if bound.comparison == "is" else (int, float)
    assert all(isinstance(value, wanted) for value in found), (bound, found)
    for key in bound.keys:  # every path reads something: no half of a bound is silently lost
        assert scenarios.figures(scenarios.Bound(**{**bound.__dict__, "keys": (key,)}),
                                 measured), (bound, key)


def test_bench_set_stands_for_its_parts_and_settings_and_the_callers_own_win():
    environ = {"BENCH_SET": "1", "BESIDE_ROUNDS": "3"}
    run_gpu.apply_set(environ)
    assert environ["BENCH_ONLY"] == ",".join(scenarios.SETS[1]["parts"])
    assert environ["BESIDE_ROUNDS"] == "3" and environ["BESIDE_MODES"] == "on"
    both = {"BENCH_SET": "all"}
    run_gpu.apply_set(both)
    assert set(both["BENCH_ONLY"].split(",")) == {
        part for chosen in scenarios.SETS.values() for part in chosen["parts"]}
    with pytest.raises(SystemExit, match="BENCH_SET is '4'; choose from 1, 2, 3 or all"):
        run_gpu.apply_set({"BENCH_SET": "4"})


def test_a_bad_bench_set_stops_the_bench_before_anything_runs():
    done = subprocess.run([sys.executable, str(REPO / "bench" / "run_gpu.py")],
                          env={**os.environ, "BENCH_SET": "everything"}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0 and "BENCH_SET is 'everything'" in done.stderr


CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import classroom, run_gpu
classroom.HERE = Path(sys.argv[2])
classroom.TRAINER_ALONE_S = 0.3
sys.exit(run_gpu.main())
"""


def test_bench_gpu_ends_with_the_registrys_table_and_writes_it_in_its_json(tmp_path):
    """The whole of bench/run_gpu.py for one part (the classroom with stand-ins, a stand-in
    nvidia-smi and MPS control daemon): its line, the table, the JSON's rows and timings."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho 143000\n")  # an H200's free MiB, whatever is asked
    smi.chmod(0o755)
    env = {**os.environ, "PATH": f"{smi.parent}:{REPO / 'tests' / 'fake_mps'}:"
           f"{os.environ['PATH']}", "BENCH_ONLY": "classroom", "CLASSROOM_PROGRAMS": "2",
           "CLASSROOM_BURSTS": "2", "CLASSROOM_PERIOD_S": "0.3",
           "BENCH_JSON": str(tmp_path / "out.json")}
    done = subprocess.run([sys.executable, "-c", CHILD, str(REPO / "bench"),
                           str(REPO / "tests" / "bench" / "standins")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "classroom in_step, on: bursts median" in done.stdout
    assert "scenario registry (bench/scenarios.py)" in done.stdout
    results = json.loads((tmp_path / "out.json").read_text())
    assert results["part_seconds"].keys() == {"classroom"}
    rows = {(row["scenario"], row["bound"]): row for row in results["registry"]}
    assert len(rows) == len(BOUNDS)
    ran = rows[("classroom out of step, on", "every burst ended")]
    assert ran["figure"] is True and ran["verdict"] == "pass"
    assert rows[("overhead", "launches/s, libnvs / plain")]["verdict"] == "not run"


# ----- the table -----------------------------------------------------------------------------

SAMPLE = {
    "environment": {"gpu": "NVIDIA H200, 580.159.04, 143771 MiB, 0 MiB", "date": "2026-12-01"},
    "launch_rate": {"ratio_b_over_a": 0.991},
    "train_steps": {"ratio_b_over_a": 0.97},
    "oversub": {"scenarios": {"oversubscribed pair, 1 s gaps": {
        "ratio_on": 0.74, "ratio_auto": 0.86,
        "together_on": {"pass_max_s": 11.0, "intact": True},
        "together_auto": {"pass_max_s": 13.5, "intact": False}}}},
    "notebooks": {"sets": {"4x12": {"skipped": "49152 MiB is more than half of the free"}}},
    "classroom": {"in_step": {"on": {"error": "RuntimeError: a program did not get ready\n..."}}},
    "multi_gpu": {"skipped": "needs two GPUs; nvidia-smi lists 1"},
}


def verdicts(entries: list[dict], scenario: str) -> dict:
    return {entry["bound"]: (entry["figure"], entry["verdict"], entry["note"])
            for entry in entries if entry["scenario"] == scenario}


def test_each_figure_is_judged_by_its_bound_and_the_worst_of_several_counts():
    entries = scenario_table.rows(SAMPLE)
    overhead = verdicts(entries, "overhead")
    assert overhead["launches/s, libnvs / plain"][:2] == (0.991, "pass")
    assert overhead["training steps/s, libnvs / plain"][:2] == (0.97, "FAIL")
    gaps = verdicts(entries, "oversubscribed pair, 1 s gaps")
    assert gaps["on: together / one after the other"][:2] == (0.74, "pass")
    assert gaps["auto: together / one after the other"][:2] == (0.86, "FAIL")
    assert gaps["on: longest pass"][:2] == (11.0, "pass")
    assert gaps["auto: longest pass"][:2] == (13.5, "FAIL")
    # One run's data not intact fails the whole bound, whichever mode it was.
    intact = verdicts(entries, "frameworks' results unchanged")
    assert intact["oversubscribed pairs' elements intact"][:2] == (False, "FAIL")


def test_what_was_not_measured_says_why_and_a_part_that_ran_without_the_figure_fails():
    entries = scenario_table.rows(SAMPLE)
    skipped = verdicts(entries, "notebooks 4 x 12 GiB")["on: cell median"]
    assert skipped[1] == "not run" and "more than half of the free" in skipped[2]
    failed = verdicts(entries, "classroom in step, on")["trainer / alone"]
    assert failed[1] == "FAIL" and "a program did not get ready" in failed[2]
    two = verdicts(entries, "DDP gangs")["revocations"]
    assert two[1] == "not run" and "needs 2 GPUs" in two[2]
    absent = verdicts(entries, "burst beside a trainer")["burst median / alone"]
    assert absent[1] == "not run" and "measured by BENCH_SET 1" in absent[2]
    compute = verdicts(entries, "oversubscribed pair, compute-bound")["on: longest pass"]
    assert compute == (None, "FAIL", "no figure: the part ran without it")  # oversub ran


def test_the_table_has_a_line_per_bound_with_figure_bound_and_verdict(capsys):
    entries = scenario_table.print_registry(SAMPLE)
    out = capsys.readouterr().out
    assert "NVIDIA H200" in out and "2026-12-01" in out
    line = next(line for line in out.splitlines() if "training steps/s" in line)
    assert "0.97x" in line and ">= 0.98x" in line and line.rstrip().endswith("FAIL")
    assert len([line for line in out.splitlines() if line.startswith(("overhead", "DDP"))]) == 5
    kept = sum(entry["verdict"] == "pass" for entry in entries)
    assert f"{kept} bounds kept" in out


def test_the_table_of_two_runs_is_one(tmp_path, capsys):
    first, second = tmp_path / "1.json", tmp_path / "2.json"
    first.write_text('{"environment": {"gpu": "H200", "date": "2026-12-01"}, '
                     '"launch_rate": {"ratio_b_over_a": 0.5}, "registry": []}')
    second.write_text('{"environment": {"gpu": "H100", "date": "2026-12-02"}, '
                      '"launch_rate": {"ratio_b_over_a": 1.0}, '
                      '"train_steps": {"ratio_b_over_a": 0.99}}')
    assert scenario_table.main([str(first), str(second), "--json", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    assert "H200" in out and "H100" not in out  # the first run's machine
    overhead = verdicts(scenario_table.rows(scenario_table.merged([first, second])), "overhead")
    assert overhead["launches/s, libnvs / plain"][:2] == (1.0, "pass")  # the later run's part
    assert overhead["training steps/s, libnvs / plain"][:2] == (0.99, "pass")
    (tmp_path / "bad.json").write_text("[1]")
    with pytest.raises(SystemExit, match="bad.json: not a bench-gpu JSON file"):
        scenario_table.main([str(tmp_path / "bad.json")])


def test_the_registry_lists_itself_with_each_scenarios_tests_and_keys(capsys):
    assert scenario_table.main(["--list"]) == 0
    out = capsys.readouterr().out
    for scenario in scenarios.SCENARIOS:
        assert scenario.name in out and all(test in out for test in scenario.fake_tests)
    assert "DDP gangs (needs 2 GPUs: BENCH_ONLY=multi_gpu)" in out
    assert "notebooks 4 x 12 GiB (BENCH_SET 1)" in out
    assert "bound: on: cell median <= 0.45 s  <- notebooks: sets/4x12/on/every_cell_median_s" in out
