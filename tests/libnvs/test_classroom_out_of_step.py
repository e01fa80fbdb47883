"""A classroom out of step on the fake driver (bench/classroom_fake.py): six notebooks, a cell
of 100 kernels of 1 ms every 3 s each, their moments 0.5 s apart, beside a busy program that
never pauses, with libnvs.so and the real scheduler: under `on` at TQ 5, and under `auto --mps`
(the stand-in MPS daemon) with a rule giving the busy program mps_priority = "low". Every cell
counts, each notebook's first included; each stays within 0.4 s of its time alone at the median
and 1.5 s at the slowest, the bounds the classroom in step is held to. The GPU's classroom is
bench/classroom.py (scenario registry: bench/scenarios.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from classroom_fake import Classroom, alone, shared  # noqa: E402

SETUP = Classroom(in_step=False)
MEDIAN_OVER_ALONE_S = 0.4
SLOWEST_OVER_ALONE_S = 1.5


@pytest.fixture(scope="module")
def cells_alone(built, tmp_path_factory):
    return alone(tmp_path_factory.mktemp("classroom") / "alone", SETUP)


@pytest.mark.parametrize("mode", ["on", "auto"])
def test_classroom_out_of_step(cells_alone, short_tmp_dirs, mode):
    run = shared(short_tmp_dirs() / mode, SETUP, mode)
    log = run.pop("log")
    assert run["cells"] == SETUP.notebooks * SETUP.cells == cells_alone["cells"]
    assert run["busy_outlived_cells"], "the busy program ended before the cells: they ran alone"
    drivers = run.pop("drivers")
    assert len(drivers) == SETUP.notebooks + 1
    if mode == "auto":  # all through the scheduler's MPS, only the busy one at low priority
        assert {(busy, pipe != "-", priority) for busy, pipe, priority in drivers} == {
            (True, True, "1"), (False, True, "-")}, drivers
    else:
        assert {pipe for _, pipe, _ in drivers} == {"-"}, drivers
    alone_s = cells_alone["cell_median_s"]
    assert run["cell_median_s"] <= alone_s + MEDIAN_OVER_ALONE_S, (run, cells_alone, log[-6000:])
    assert run["cell_max_s"] <= alone_s + SLOWEST_OVER_ALONE_S, (run, cells_alone, log[-6000:])
