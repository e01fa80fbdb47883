"""A classroom on the fake driver (bench/classroom_fake.py): six notebooks, a cell of 100
kernels of 1 ms every 3 s each, beside a busy program that never pauses, with libnvs.so and the
real scheduler: under `on` at TQ 5, and under `auto --mps` (the stand-in MPS daemon) with a rule
giving the busy program mps_priority = "low". Out of step, the cells are due 0.5 s apart; in
step, all at the same moment. Every cell counts, each notebook's first included.

Out of step, each cell stays within 0.4 s of its time alone at the median and 1.5 s at the
slowest, and so in threes (three cells due 150 ms apart, twice a period): there the second of
three is due while the first holds and the busy program waits, and the third while they still
do. When a waiter was passed once at most (main d862806), the busy program, passed by the
second, went ahead of the third, which waited out its quantum; now each is served after the
ones before it. In step the cells can only take turns, so each is held to its place in line;
the slowest took 5.8-6.0 s before in some runs. The GPU's classroom is bench/classroom.py (bench/scenarios.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from classroom_fake import Classroom, alone, shared  # noqa: E402

IN_STEP, OUT_OF_STEP = Classroom(in_step=True), Classroom(in_step=False)
# In threes, 150 ms apart: the second of three is due while the first holds and the busy
# program waits, so it passes that program; the third is due while they still do.
IN_THREES = Classroom(offsets_ms=(0, 150, 300, 1500, 1650, 1800))
SETUPS = (IN_STEP, OUT_OF_STEP, IN_THREES)
MEDIAN_OVER_ALONE_S = 0.4
SLOWEST_OVER_ALONE_S = 1.5


@pytest.fixture(scope="module")
def cells_alone(built, tmp_path_factory):
    """The cells alone, in each arrangement (in step they are alone too: no layer, no
    competition on the fake driver)."""
    directory = tmp_path_factory.mktemp("classroom")
    return {setup: alone(directory / f"alone-{index}", setup)
            for index, setup in enumerate(SETUPS)}


@pytest.mark.parametrize("mode", ["on", "auto"])
def test_classroom_out_of_step(cells_alone, short_tmp_dirs, mode):
    check_classroom(cells_alone[OUT_OF_STEP], short_tmp_dirs() / mode, OUT_OF_STEP, mode)


def test_classroom_in_threes_on(cells_alone, short_tmp_dirs):
    check_classroom(cells_alone[IN_THREES], short_tmp_dirs() / "on", IN_THREES, "on")


# In step the cells can only take turns: the k-th served waits for the k - 1 before it, each
# holding its cell and the idle time before it lets go (100 ms while others wait). Held to that
# line and a minimum slice, and at the slowest to no wait for the busy program's quantum.
IN_STEP_TURN_S = 0.1


def test_classroom_in_step_on(cells_alone, short_tmp_dirs):
    check_classroom(cells_alone[IN_STEP], short_tmp_dirs() / "on", IN_STEP, "on", in_turn=True)


def test_classroom_in_step_auto(cells_alone, short_tmp_dirs):
    check_classroom(cells_alone[IN_STEP], short_tmp_dirs() / "auto", IN_STEP, "auto",
                    in_turn=True)


def check_classroom(cells_alone: dict, directory: Path, setup: Classroom, mode: str,
                    in_turn: bool = False) -> None:
    run = shared(directory, setup, mode)
    log = run.pop("log")
    assert run["cells"] == setup.notebooks * setup.cells == cells_alone["cells"]
    assert run["busy_outlived_cells"], "the busy program ended before the cells: they ran alone"
    drivers = run.pop("drivers")
    assert len(drivers) == setup.notebooks + 1
    if mode == "auto":  # all through the scheduler's MPS, only the busy one at low priority
        assert {(busy, pipe != "-", priority) for busy, pipe, priority in drivers} == {
            (True, True, "1"), (False, True, "-")}, drivers
    else:
        assert {pipe for _, pipe, _ in drivers} == {"-"}, drivers
    alone_s = cells_alone["cell_median_s"]
    # The median cell is served after half the others, in step.
    line_s = (alone_s + IN_STEP_TURN_S) * (setup.notebooks - 1) / 2 if in_turn else 0.0
    assert run["cell_median_s"] <= alone_s + line_s + MEDIAN_OVER_ALONE_S, \
        (run, cells_alone, log[-6000:])
    assert run["cell_max_s"] <= alone_s + 2 * line_s + SLOWEST_OVER_ALONE_S, \
        (run, cells_alone, log[-6000:])
