"""A classroom on the fake driver (bench/classroom_fake.py): six notebooks, a cell of 100
kernels of 1 ms every 3 s each, beside a busy program that never pauses, with libnvs.so and the
real scheduler: under `on` at TQ 5, and under `auto --mps` (the stand-in MPS daemon) with a rule
giving the busy program mps_priority = "low". In step, every cell is due at the same moment; out
of step, the moments are 0.5 s apart. Every cell counts, each notebook's first included; each
stays within 0.4 s of its time alone at the median and 1.5 s at the slowest.

In step under `on`, the notebooks queue behind one another and the busy program: each waits for
the cells before it and a minimum slice at most, never for the busy program's whole quantum. When
a waiter was passed once at most (main d862806), the busy program, passed by the first notebook,
went ahead of the others, and the slowest cell took 6 s. The GPU's classroom is
bench/classroom.py (scenario registry: bench/scenarios.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from classroom_fake import Classroom, alone, shared  # noqa: E402

IN_STEP, OUT_OF_STEP = Classroom(in_step=True), Classroom(in_step=False)
MEDIAN_OVER_ALONE_S = 0.4
SLOWEST_OVER_ALONE_S = 1.5


@pytest.fixture(scope="module")
def cells_alone(built, tmp_path_factory):
    """The cells alone, in each arrangement (in step they are alone too: no layer, no
    competition on the fake driver)."""
    directory = tmp_path_factory.mktemp("classroom")
    return {setup: alone(directory / f"alone-{setup.in_step}", setup)
            for setup in (IN_STEP, OUT_OF_STEP)}


@pytest.mark.parametrize("mode", ["on", "auto"])
def test_classroom_out_of_step(cells_alone, short_tmp_dirs, mode):
    check_classroom(cells_alone[OUT_OF_STEP], short_tmp_dirs() / mode, OUT_OF_STEP, mode)


def test_classroom_in_step_on(cells_alone, short_tmp_dirs):
    check_classroom(cells_alone[IN_STEP], short_tmp_dirs() / "on", IN_STEP, "on")


def test_classroom_in_step_auto(cells_alone, short_tmp_dirs):
    check_classroom(cells_alone[IN_STEP], short_tmp_dirs() / "auto", IN_STEP, "auto")


def check_classroom(cells_alone: dict, directory: Path, setup: Classroom, mode: str) -> None:
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
    assert run["cell_median_s"] <= alone_s + MEDIAN_OVER_ALONE_S, (run, cells_alone, log[-6000:])
    assert run["cell_max_s"] <= alone_s + SLOWEST_OVER_ALONE_S, (run, cells_alone, log[-6000:])
