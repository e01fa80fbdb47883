"""bench-gpu part `classroom` without a GPU: its figures from what the programs print (every
burst, the first ones included), its settings, and its runs with the stand-ins of
tests/bench/standins/: notebooks in step start their bursts together, out of step spread over
the period, and `auto --mps` gives the trainer its low priority by a config rule."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import classroom  # noqa: E402
from part_runs import LIBRARY, STANDINS, run_part  # noqa: E402


def bursts(*seconds: float, start: float = 100.0, period: float = 4.0) -> str:
    return "\n".join(json.dumps({"burst": index, "start": start + index * period,
                                 "seconds": value}) for index, value in enumerate(seconds))


def test_every_burst_counts_and_the_worst_notebook_is_the_one_judged():
    # The first notebook's first burst waited: its median is the worst, whatever the others.
    outputs = [bursts(2.0, 0.5, 0.4), bursts(0.4, 0.45, 0.4), bursts(0.42, 0.4, 0.41)]
    trainer = "\n".join(f"{100 + step / 10:.6f}" for step in range(200))  # 10 steps a second
    result = classroom.figures(outputs, trainer, 3)
    assert result["bursts_done"] == 9 and result["complete"] is True
    assert result["worst_program_median_s"] == 0.5 and result["burst_max_s"] == 2.0
    # From the first burst's moment (100 s) to the last one's end (108.4 s).
    assert result["trainer_its"] == pytest.approx(84 / 8.4, rel=0.02)
    judged = classroom.against_alone(result, alone_burst=0.4, alone_its=20.0)
    assert judged["burst_ratio"] == pytest.approx(1.25)
    assert judged["trainer_share"] == pytest.approx(0.5, rel=0.02)


def test_a_notebook_that_made_no_burst_leaves_nothing_to_judge_it_by():
    result = classroom.figures([bursts(0.4, 0.4), '{"burst": 0, "sta'], None, 2)
    assert result["complete"] is False and result["bursts_done"] == 2
    assert result["worst_program_median_s"] is None and "trainer_its" not in result
    assert classroom.against_alone(result, 0.4, 20.0)["burst_ratio"] is None


def test_in_step_every_moment_is_the_same_out_of_step_they_spread_over_the_period():
    assert classroom.offsets("in_step", 6, 4.0) == [0.0] * 6
    assert classroom.offsets("out_of_step", 4, 4.0) == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("environ", [{"CLASSROOM_SETUPS": "on,mps"},
                                     {"CLASSROOM_ARRANGEMENTS": "sideways"},
                                     {"CLASSROOM_BURSTS": "0"}, {"CLASSROOM_PERIOD_S": "soon"}])
def test_bad_settings_stop_before_anything_runs(environ):
    with pytest.raises(SystemExit, match="CLASSROOM_"):
        classroom.settings(environ)


def test_a_busy_card_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(classroom, "free_mib", lambda: [12000])
    result = classroom.measure(sys.executable, LIBRARY, tmp_path, classroom.settings({}))
    assert "12000 MiB free" in result["skipped"] and not any(tmp_path.iterdir())


def test_a_notebook_that_fails_is_an_error_with_its_last_words(monkeypatch, tmp_path):
    monkeypatch.setattr(classroom, "HERE", STANDINS)
    monkeypatch.setenv("BESIDE_STANDIN", "fail")  # the stand-in's: exit after its first burst
    chosen = classroom.settings({"CLASSROOM_BURSTS": "2", "CLASSROOM_PERIOD_S": "0.2"})
    with pytest.raises(RuntimeError, match="out of memory"):
        classroom.run(sys.executable, dict(os.environ), tmp_path, chosen, [0.0, 0.1], False)


@pytest.fixture(scope="module")
def lesson():
    """The part run with stand-ins, its schedulers real: (result, the folder it ran in)."""
    directory = Path(tempfile.mkdtemp(prefix="gs-", dir="/tmp"))  # sockets need short paths
    yield run_part("classroom", directory / "classroom"), directory / "classroom"
    shutil.rmtree(directory, ignore_errors=True)


def starts(folder: Path, programs: int) -> list[list[float]]:
    return [[json.loads(line)["start"] for line in (folder / f"notebook{index}.out")
             .read_text().splitlines()] for index in range(programs)]


def test_notebooks_in_step_start_together_and_out_of_step_apart(lesson):
    result, directory = lesson
    period = result["period_s"]
    together = starts(directory / "in_step" / "on" / "run", result["programs"])
    apart = starts(directory / "out_of_step" / "on" / "run", result["programs"])
    for burst in range(result["bursts"]):
        moments = [program[burst] for program in together]
        assert max(moments) - min(moments) < 0.01, together
        spread = sorted(program[burst] - apart[0][0] for program in apart)
        assert spread == pytest.approx([burst * period + index * period / result["programs"]
                                        for index in range(result["programs"])], abs=0.02)


def test_every_run_has_its_figures_against_the_references(lesson):
    result, _ = lesson
    for arrangement in ("in_step", "out_of_step"):
        for setup in ("on", "auto_mps_low"):
            entry = result[arrangement][setup]
            assert entry["complete"] and entry["trainer_outlived_bursts"], entry
            assert entry["burst_ratio"] > 0 and entry["trainer_share"] > 0, entry


def test_auto_mps_runs_its_scheduler_with_mps_and_the_trainers_low_priority_rule(lesson):
    _, directory = lesson
    where = directory / "in_step" / "auto_mps_low"
    (config,) = where.glob("*.toml")
    assert config.read_text() == '[[rule]]\nmatch = { label = "trainer" }\nmps_priority = "low"\n'
    log = (where / "scheduler" / "scheduler.log").read_text()
    assert f"config {config}: 1 rule" in log
    assert "tq 5 s, anti-thrash auto" in log and "MPS on" in log
    assert "told the control daemon" in log  # its own MPS daemon, quit as it stopped
    trainer = (where / "run" / "trainer.err").read_text()
    assert f"GEMSHARE_SOCKET {where / 'scheduler' / 'scheduler.sock'}" in trainer
    assert "GEMSHARE_LABEL trainer" in trainer  # what the rule matches
    on = (directory / "in_step" / "on" / "scheduler" / "scheduler.log").read_text()
    assert "tq 5 s, anti-thrash on" in on and "MPS on" not in on
