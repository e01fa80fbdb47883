"""bench-gpu part `beside_trainer` without a GPU: its figures from what the programs print, the
summary over rounds and the goals, its settings, and its runs with stand-ins for the two GPU
programs (tests/bench/standins/), timeouts and failures included. Speed is never asserted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import beside_report as report  # noqa: E402
import beside_trainer  # noqa: E402
import run_gpu  # noqa: E402
from scheduler_log import lock_events  # noqa: E402

STANDINS = Path(__file__).resolve().parent / "standins"
ENVIRONMENT = {"gpu": "Test GPU", "torch": "2.11.0", "torch_cuda": "13.0", "date": "2026-11-22"}
EVENTS = {"grants": 3, "drops": 2, "revocations": 0, "early_releases": 1}


def bursts_out(*seconds: float, start: float = 100.0, gap: float = 2.0) -> str:
    lines = [json.dumps({"burst": index, "start": start + index * gap, "seconds": value})
             for index, value in enumerate(seconds)]
    return "\n".join(lines) + '\n{"burst": 9, "sta'  # the last line cut short by a kill


def together_run(*seconds: float, its: float = 40.0, **more) -> dict:
    run = {**report.bursts_figures([{"start": 0, "seconds": s} for s in seconds], 6),
           "trainer_its": its, "trainer_outlived_bursts": True, "timed_out": False,
           "pids": {"trainer": 10, "bursts": 11}}
    return {**run, **more}


def shared_run(*seconds: float, its: float = 40.0, args=(), **more) -> dict:
    return together_run(*seconds, its=its, scheduler={"mode": "on", "tq": 30, "args": list(args)},
                        lock={"trainer": EVENTS, "bursts": {**EVENTS, "drops": 0}}, **more)


def one_round(on: dict, alone_burst: float = 0.4, alone_its: float = 50.0) -> dict:
    return {"bursts_alone": {**report.bursts_figures([{"start": 0, "seconds": alone_burst}] * 6,
                                                     6), "timed_out": False},
            "trainer_alone": {"trainer_its": alone_its, "window_s": 10.0},
            "no_layer": together_run(0.8, 0.9, 0.85, 0.8, 0.8, 0.8, its=30.0), "on": on}


# ----- figures ---------------------------------------------------------------------------------


def test_bursts_and_steps_are_read_back_past_a_line_cut_short():
    records = report.burst_records(bursts_out(0.5, 0.4) + "\nnot json\n[1, 2]")
    assert [record["seconds"] for record in records] == [0.5, 0.4]
    assert report.step_times("1.5\n2.5\n\nx\n3.") == [1.5, 2.5, 3.0]


def test_steps_per_second_count_only_inside_the_window():
    steps = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
    assert report.steps_per_s(steps, 1.0, 3.0) == 4 / 2.0  # 1.0 itself ended before it
    assert report.steps_per_s(steps, 3.0, 3.0) is None


def test_together_the_trainer_counts_from_the_first_burst_to_the_last_ones_end():
    trainer = "\n".join(f"{100 + step * 0.1:.6f}" for step in range(100))  # 10 it/s
    figures = report.together_figures(bursts_out(0.5, 0.3, 0.4), trainer, 6, outlived=True)
    assert figures["window_s"] == pytest.approx(4.4)
    assert figures["trainer_its"] == pytest.approx(44 / 4.4)
    assert (figures["burst_median_s"], figures["burst_max_s"]) == (0.4, 0.5)
    assert (figures["bursts_done"], figures["bursts_wanted"]) == (3, 6)
    nothing = report.together_figures("", trainer, 6, outlived=False)
    assert nothing["trainer_its"] is None and nothing["burst_median_s"] is None
    assert nothing["trainer_outlived_bursts"] is False


def test_lock_events_are_counted_per_process():
    log = "\n".join([
        "10:00:00.000 INFO register client 1 (pid 10, python3): uid 0, device 0",
        "10:00:00.100 INFO grant client 1 (pid 10, python3): device 0",
        "10:00:03.000 INFO request client 2 (pid 11, python3): device 0, 1 waiting",
        "10:00:03.300 INFO drop client 1 (pid 10, python3): device 0 after its minimum slice",
        "10:00:03.310 INFO release client 1 (pid 10, python3): device 0 after drop, held 3.2 s",
        "10:00:03.311 INFO grant client 2 (pid 11, python3): device 0 after waiting 0.311 s",
        "10:00:04.000 INFO release client 2 (pid 11, python3): device 0 early (idle), held 0.7 s",
        "10:00:04.001 INFO grant client 1 (pid 10, python3): device 0 after waiting 0.690 s",
        "10:00:09.000 INFO revoke client 3 (pid 12, x (pid 9, y): z): device 0, no release"])
    assert lock_events(log, 10) == {"grants": 2, "drops": 1, "revocations": 0,
                                    "early_releases": 0}
    assert lock_events(log, 11) == {"grants": 1, "drops": 0, "revocations": 0,
                                    "early_releases": 1}
    assert lock_events(log) == {"grants": 3, "drops": 1, "revocations": 1, "early_releases": 1}


# ----- summary and goals -----------------------------------------------------------------------


def test_the_summary_takes_medians_over_rounds_and_sets_them_against_the_goals():
    rounds = [one_round(shared_run(0.5, 0.5, 0.5, 0.5, 0.5, 0.9, its=40.0)),
              one_round(shared_run(0.45, 0.45, 0.45, 0.45, 0.45, 0.45, its=36.0)),
              one_round(shared_run(0.48, 0.48, 0.48, 0.48, 0.48, 0.48, its=42.0))]
    result = report.summary(rounds)
    on = result["on"]
    assert on["burst_median_s"] == 0.48 and on["burst_max_s"] == 0.9 and on["rounds"] == 3
    assert on["burst_ratio"] == pytest.approx(1.2) and on["trainer_share"] == pytest.approx(0.8)
    assert on["goals"] == {"bursts": True, "trainer": True}
    assert on["lock"]["trainer"] == EVENTS and on["lock"]["bursts"]["drops"] == 0
    assert result["no_layer"]["burst_ratio"] == pytest.approx(2.0)
    assert "goals" not in result["no_layer"]  # the reference, not held to the goals
    assert "burst_ratio" not in result["bursts_alone"]


def test_goals_are_missed_by_slow_bursts_a_starved_trainer_or_runs_cut_short():
    slow = report.summary([one_round(shared_run(*[0.6] * 6, its=30.0))])["on"]
    assert slow["goals"] == {"bursts": False, "trainer": False}
    # Fast bursts that did not all end: the one that did not may have waited without end.
    cut = report.summary([one_round(shared_run(0.4, 0.4, its=45.0))])["on"]
    assert cut["complete"] is False and cut["goals"] == {"bursts": False, "trainer": True}
    ended = report.summary([one_round(shared_run(*[0.4] * 6, its=45.0,
                                                 trainer_outlived_bursts=False))])["on"]
    assert ended["goals"] == {"bursts": True, "trainer": False}


def test_failed_rounds_are_left_out_and_a_run_that_always_failed_keeps_its_error():
    failed = {"error": "RuntimeError: the scheduler exited"}
    rounds = [one_round(failed), one_round(shared_run(*[0.4] * 6, its=45.0))]
    rounds[0]["trainer_alone"] = failed
    result = report.summary(rounds)
    assert result["on"]["failed_rounds"] == 1 and result["on"]["rounds"] == 1
    assert result["trainer_alone"]["trainer_its"] == 50.0
    rounds[1]["trainer_alone"] = failed
    result = report.summary(rounds)
    assert result["trainer_alone"] == {"error": failed["error"], "failed_rounds": 2}
    assert result["on"]["trainer_share"] is None and result["on"]["goals"]["trainer"] is None


# ----- printing --------------------------------------------------------------------------------


def part(rounds: list[dict]) -> dict:
    chosen = beside_trainer.settings({"BESIDE_SCHEDULER_ARGS": "--min-slice-ms 300"})
    return {**chosen, "rounds": rounds, "summary": report.summary(rounds)}


def test_the_table_shows_every_run_its_ratios_lock_and_goals(capsys):
    rounds = [one_round(shared_run(0.5, 0.5, 0.5, 0.5, 0.5, 0.9, its=40.0,
                                   args=["--min-slice-ms", "300"]))]
    rounds[0]["auto"] = {"error": "RuntimeError: python3 matmul_bursts.py exited 1:\nTraceback\n"
                                  "torch.OutOfMemoryError"}
    run_gpu.print_table({"environment": ENVIRONMENT, "beside_trainer": part(rounds)})
    out = capsys.readouterr().out
    assert ("beside_trainer: 6 bursts of 20 matmuls 8192^2, 2 s apart, beside a trainer of one "
            "such matmul a step; TQ 30 s; 1 round(s), medians") in out
    assert "  bursts_alone: burst median 0.400 s, max 0.400 s\n" in out
    assert "  trainer_alone: 50.0 it/s\n" in out
    assert ("  no_layer: burst median 0.800 s (2.00x alone), max 0.900 s; trainer 30.0 it/s "
            "(60% of alone)\n") in out
    assert ("  on [--min-slice-ms 300]: burst median 0.500 s (1.25x alone), max 0.900 s; "
            "trainer 40.0 it/s (80% of alone); lock: trainer 3 grants/2 drops/0 revocations/"
            "1 early releases, bursts 3 grants/0 drops/0 revocations/1 early releases; "
            "goals: bursts <= 1.3x met, trainer >= 75% met\n") in out
    assert ("  auto: FAILED (RuntimeError: python3 matmul_bursts.py exited 1: ... "
            "torch.OutOfMemoryError)") in out


def test_the_table_flags_runs_cut_short(capsys):
    rounds = [one_round(shared_run(0.4, its=30.0, trainer_outlived_bursts=False))]
    report.print_beside(part(rounds))
    out = capsys.readouterr().out
    assert "BURSTS NOT ALL DONE" in out and "TRAINER ENDED FIRST" in out
    assert "goals: bursts <= 1.3x MISSED, trainer >= 75% MISSED" in out
    report.print_beside({"skipped": "3000 MiB free"})
    assert capsys.readouterr().out == "beside_trainer: skipped (3000 MiB free)\n"


def test_a_runs_progress_line_has_its_figures_but_no_goals_yet():
    line = report.run_line("on", shared_run(0.4, its=30.0, timed_out=True))
    assert line.startswith("on: burst median 0.400 s, max 0.400 s, BURSTS NOT ALL DONE; "
                           "trainer 30.0 it/s; lock: trainer 3 grants")
    assert line.endswith("; TIMED OUT") and "goals" not in line


# ----- settings --------------------------------------------------------------------------------


def test_settings_default_and_from_the_environment():
    chosen = beside_trainer.settings({})
    assert (chosen["bursts"], chosen["rounds"], chosen["modes"]) == (6, 1, ["on", "auto"])
    assert chosen["scheduler_args"] == [] and chosen["scheduler_args_b"] is None
    assert (chosen["tq"], chosen["matmuls"], chosen["size"], chosen["gap_s"]) == (30, 20, 8192, 2)
    chosen = beside_trainer.settings({"BESIDE_BURSTS": "3", "BESIDE_ROUNDS": "2",
                                      "BESIDE_MODES": " on ", "BESIDE_SCHEDULER_ARGS_B": "",
                                      "BESIDE_SCHEDULER_ARGS": "--min-slice-ms '300'"})
    assert (chosen["bursts"], chosen["rounds"], chosen["modes"]) == (3, 2, ["on"])
    assert chosen["scheduler_args"] == ["--min-slice-ms", "300"]
    assert chosen["scheduler_args_b"] == []  # set, if empty: the scheduler's defaults as B


@pytest.mark.parametrize("environ", [{"BESIDE_BURSTS": "six"}, {"BESIDE_ROUNDS": "0"},
                                     {"BESIDE_MODES": "on,fcfs"}, {"BESIDE_MODES": ","},
                                     {"BESIDE_SCHEDULER_ARGS": "--tq '5"}])
def test_bad_settings_stop_before_anything_runs(environ):
    with pytest.raises(SystemExit):
        beside_trainer.settings(environ)


def test_a_and_b_take_turns_going_first():
    chosen = beside_trainer.settings({"BESIDE_SCHEDULER_ARGS": "--min-slice-ms 300",
                                      "BESIDE_SCHEDULER_ARGS_B": "--min-slice-ms 0"})
    assert beside_trainer.shared_runs(chosen, 0) == [
        ("on", "on", ["--min-slice-ms", "300"]), ("on_b", "on", ["--min-slice-ms", "0"]),
        ("auto", "auto", ["--min-slice-ms", "300"]), ("auto_b", "auto", ["--min-slice-ms", "0"])]
    assert [name for name, _, _ in beside_trainer.shared_runs(chosen, 1)] == \
        ["on_b", "on", "auto_b", "auto"]
    alone = beside_trainer.settings({"BESIDE_MODES": "auto"})
    assert beside_trainer.shared_runs(alone, 1) == [("auto", "auto", [])]


def test_a_busy_card_is_refused_and_bench_only_knows_the_part(monkeypatch):
    assert "3000 MiB free" in beside_trainer.refusal([81559, 3000])
    assert beside_trainer.refusal([]) and beside_trainer.refusal([81559]) is None
    monkeypatch.setenv("BENCH_ONLY", "beside_trainer")
    assert run_gpu.chosen_parts() == {"beside_trainer"}


def test_bad_settings_stop_the_whole_bench_at_once():
    env = {**os.environ, "BENCH_ONLY": "beside_trainer", "BESIDE_MODES": "fcfs"}
    done = subprocess.run([sys.executable, str(REPO / "bench" / "run_gpu.py")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "BESIDE_MODES" in done.stderr


# ----- runs with stand-ins ---------------------------------------------------------------------


@pytest.fixture
def standins(monkeypatch):
    """The runner with the stand-in programs and short time limits; its settings."""
    monkeypatch.setattr(beside_trainer, "HERE", STANDINS)
    monkeypatch.setattr(beside_trainer, "TRAINER_ALONE_S", 0.3)
    monkeypatch.setattr(beside_trainer, "START_UP_S", 3.0)
    monkeypatch.setattr(beside_trainer, "BURST_SLACK_S", 0.5)
    monkeypatch.setattr(beside_trainer, "STOP_GRACE_S", 2.0)
    monkeypatch.delenv("BESIDE_STANDIN", raising=False)
    return {**beside_trainer.settings({"BESIDE_BURSTS": "3"}), "gap_s": 0.1}


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_runs_alone_and_together(standins, tmp_path):
    python = sys.executable
    alone = beside_trainer.bursts_alone(python, standins, dict(os.environ), tmp_path / "b")
    assert alone["bursts_done"] == 3 and alone["timed_out"] is False
    assert 0.05 <= alone["burst_median_s"] < 1
    trainer = beside_trainer.trainer_alone(python, standins, dict(os.environ), tmp_path / "t")
    assert trainer["trainer_its"] > 0 and trainer["window_s"] >= 0.3
    run = beside_trainer.together(python, standins, dict(os.environ), tmp_path / "both")
    assert run["bursts_done"] == 3 and run["trainer_outlived_bursts"] is True
    assert run["trainer_its"] > 0 and not run["timed_out"]
    assert all(gone(pid) for pid in run["pids"].values())


def test_bursts_that_run_out_of_time_keep_what_they_did(standins, tmp_path, monkeypatch):
    monkeypatch.setenv("BESIDE_STANDIN", "hang")
    run = beside_trainer.together(sys.executable, standins, dict(os.environ), tmp_path / "h")
    assert run["timed_out"] is True and run["bursts_done"] == 1
    assert all(gone(pid) for pid in run["pids"].values())


@pytest.mark.parametrize("behaviour, said", [("crash", "the trainer fell over"),
                                             ("fail", "out of memory")])
def test_a_program_that_fails_is_an_error_with_its_last_words(standins, tmp_path, monkeypatch,
                                                              behaviour, said):
    monkeypatch.setenv("BESIDE_STANDIN", behaviour)
    with pytest.raises(RuntimeError, match=said):
        beside_trainer.together(sys.executable, standins, dict(os.environ), tmp_path / "f")


def test_a_shared_run_has_its_own_scheduler_with_the_extra_flags(standins, short_tmp_dirs,
                                                                 tmp_path, monkeypatch):
    monkeypatch.setenv("BESIDE_LOGS", str(tmp_path / "logs"))
    directory = short_tmp_dirs() / "round0" / "on"
    # The stand-ins use no CUDA: a library that does not load leaves them as they are.
    run = beside_trainer.shared(sys.executable, standins, tmp_path / "libnvs.so", directory,
                                "on", ["--grace-ms", "700"])
    assert run["scheduler"] == {"mode": "on", "tq": 30, "args": ["--grace-ms", "700"]}
    assert run["lock"]["trainer"] == dict.fromkeys(EVENTS, 0)  # no CUDA, so no lock
    log = (tmp_path / "logs" / "round0-on.log").read_text()
    assert "grace 700 ms" in log  # the extra flag reached the scheduler
    said = (directory / "trainer.err").read_text()
    assert f"GEMSHARE_SOCKET {directory / 'scheduler.sock'}" in said
    with pytest.raises(RuntimeError, match="scheduler did not start"):
        beside_trainer.shared(sys.executable, standins, tmp_path / "libnvs.so",
                              short_tmp_dirs() / "bad", "on", ["--min-slice-mss", "1"])


def test_a_round_records_every_run_even_when_one_fails(standins, short_tmp_dirs, monkeypatch):
    monkeypatch.setattr(beside_trainer, "free_mib", lambda: [81559])
    chosen = {**standins, "modes": ["on"], "scheduler_args": ["--no-such-flag"]}
    part = beside_trainer.measure(sys.executable, Path("/nonexistent/libnvs.so"),
                                  short_tmp_dirs(), chosen)
    runs = part["rounds"][0]
    assert list(runs) == ["bursts_alone", "trainer_alone", "no_layer", "on"]
    assert "scheduler did not start" in runs["on"]["error"]
    assert part["summary"]["no_layer"]["burst_ratio"] is not None
    monkeypatch.setattr(beside_trainer, "free_mib", lambda: [2000])
    assert "2000 MiB free" in beside_trainer.measure(
        sys.executable, Path("/nonexistent"), short_tmp_dirs(), chosen)["skipped"]


CHILD = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import beside_trainer, run_gpu
signal.signal(signal.SIGTERM, run_gpu.leave)
beside_trainer.HERE = Path(sys.argv[2])
chosen = {**beside_trainer.settings({"BESIDE_BURSTS": "100"}), "gap_s": 0.2}
beside_trainer.together(sys.executable, chosen, dict(os.environ), Path(sys.argv[3]))
"""


def test_a_bench_ended_by_sigterm_stops_its_programs(tmp_path):
    bench = subprocess.Popen([sys.executable, "-c", CHILD, str(REPO / "bench"), str(STANDINS),
                              str(tmp_path)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "bursts.out").exists() or not output_lines(tmp_path / "bursts.out"):
            assert time.monotonic() < deadline and bench.poll() is None, bench.stderr.read()
            time.sleep(0.05)
        pids = [int((tmp_path / f"{name}.err").read_text().split()[1])
                for name in ("trainer", "bursts")]
        bench.terminate()
        assert bench.wait(30) == 128 + signal.SIGTERM
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
    assert all(gone(pid) for pid in pids)


def output_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()
