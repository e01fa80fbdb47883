"""Notebooks whose memory does not fit together (docs/scheduling.md, "Notebooks"), with libnvs.so
and the real scheduler on the fake driver: four stand-ins of 1,400 MiB on a 6,144 MiB device
(two fit together in `auto`), a cell of 100 kernels every 2 s, moves at 4 GB/s
(bench/notebooks_fake.py runs them). Every cell stays close to its time alone, in both modes.
On a 4,096 MiB device, where every cell must bring memory back, no two programs do so at once.

The bounds are loose beside what they catch: before the scheduler knew notebooks, cells in
`auto` waited 11-20 s for idle co-holders' quanta, here a cell takes about 0.1 s alone."""

from __future__ import annotations

import sys
from itertools import combinations
from pathlib import Path

import pytest

import libnvs_fakelog as fakelog

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from notebooks_fake import SETUPS, Notebooks, measure, shared  # noqa: E402

SETUP = Notebooks(cells=6)
MEDIAN_OVER_ALONE_S = 0.7
SLOWEST_OVER_ALONE_S = 1.5


@pytest.fixture(scope="module")
def notebooks(tmp_path_factory):
    directory = tmp_path_factory.mktemp("notebooks")
    return directory, measure(directory, SETUP)


@pytest.mark.parametrize("mode", ["on", "auto"])
def test_every_cell_stays_close_to_its_time_alone(notebooks, mode):
    _, cells = notebooks
    alone = cells["alone"]["cell_median_s"]
    run = cells[mode]
    assert run["cell_median_s"] <= alone + MEDIAN_OVER_ALONE_S, run
    assert run["cell_max_s"] <= alone + SLOWEST_OVER_ALONE_S, run


def test_no_two_programs_bring_their_memory_back_at_once(tmp_path):
    tight = Notebooks(**{**SETUPS["tight"].__dict__, "cells": 3})
    run = shared(tmp_path / "auto", tight, "auto")
    assert run["moved"]["to_device"]["count"] >= tight.programs, run
    events = fakelog.read_events(tmp_path / "auto" / "fakecuda.log")
    pids = {e.pid for e in fakelog.named(events, "init")}
    assert len(pids) == SETUP.programs
    # Prefetches of pages already on the device move nothing (a grant after others ran
    # prefetches all of a program's memory, there or not): only those that moved bytes count.
    back = {pid: fakelog.move_intervals(events, pid, False, moving=True) for pid in pids}
    for one, other in combinations(sorted(pids), 2):
        assert fakelog.overlapping(back[one], back[other]) == [], (one, other)
