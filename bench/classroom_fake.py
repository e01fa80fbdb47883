"""A classroom on the fake driver, through the real scheduler and the real libnvs.so: N notebooks
each running a cell every PERIOD_S beside a busy program that never pauses, their cells in step
(at the same moments) or out of step (their moments spread over the period).

Each notebook is a stand-in whose cell is LAUNCHES kernels of KERNEL_US and a synchronization,
timed from the moment it is due (the stand-in's `every-ms` and `clock` steps) to the end of the
synchronization: waiting for the lock lands in it, and every cell counts, the first included.
The busy program holds the device first: kernels of BUSY_KERNEL_US back to back. The same cells
with no libnvs.so (on the fake driver programs never compete) are the reference.

Used by tests/libnvs/test_classroom.py; bench/classroom.py is the GPU's classroom.
"""

from __future__ import annotations

import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "libnvs"))
import libnvs_fakelog as fakelog  # noqa: E402
from libnvs_programs import FakeGpu, scheduler_status, wait_for, wait_for_client  # noqa: E402
from notebooks_fake import run_cells  # noqa: E402
from scheduler_process import SchedulerProcess  # noqa: E402

FAKE_MPS = REPO / "tests" / "fake_mps"
# The busy program's rule under `auto --mps`: below the notebooks' priority, as on the GPU.
TRAINER_RULE = '[[rule]]\nmatch = { label = "trainer" }\nmps_priority = "low"\n'


@dataclass(frozen=True)
class Classroom:
    notebooks: int = 6
    period_s: float = 3.0
    cells: int = 4
    launches: int = 100
    kernel_us: int = 1000
    busy_kernel_us: int = 5000
    in_step: bool = True
    tq: int = 5
    # When set, each notebook's moment in the period, in ms (in_step then says nothing).
    offsets_ms: tuple[int, ...] = ()

    def offset_ms(self, index: int) -> int:
        if self.offsets_ms:
            return self.offsets_ms[index]
        return 0 if self.in_step else round(index * self.period_s * 1000 / self.notebooks)

    def steps(self, index: int, go: Path) -> list:
        cell = ["every-ms", round(self.period_s * 1000), "clock",
                "launches", self.launches, self.kernel_us, "stream-sync", "clock"]
        return ["init", "wait-file", go, "sleep-ms", self.offset_ms(index), *cell * self.cells]

    def busy_steps(self) -> list:
        """Longer than the cells need: it is stopped once they end."""
        seconds = 2 * (self.period_s * (self.cells + 1)) + 30
        return ["init", *["launch", self.busy_kernel_us, "stream-sync"]
                * round(seconds * 1e6 / self.busy_kernel_us)]


def notebooks(gpu: FakeGpu, setup: Classroom, preload: bool, env: dict) -> list[list[float]]:
    """Every notebook from one start signal; each one's cell times."""
    return run_cells(gpu, setup.steps, setup.notebooks, setup.cells, preload,
                     {**env, "GEMSHARE_LABEL": "notebook"}, "a notebook")


def summary(cells: list[list[float]]) -> dict:
    every = [cell for program in cells for cell in program]
    return {"cell_median_s": statistics.median(every), "cell_max_s": max(every),
            "cells": len(every)}


def alone(directory: Path, setup: Classroom) -> dict:
    directory.mkdir(parents=True)
    gpu = FakeGpu(directory, directory / "no-scheduler.sock")
    try:
        return summary(notebooks(gpu, setup, False, {}))
    finally:
        gpu.stop_all()


def shared(directory: Path, setup: Classroom, mode: str) -> dict:
    """The notebooks beside the busy program under libnvs.so and a scheduler of their own:
    `on`, or `auto --mps` with the busy program's rule."""
    directory.mkdir(parents=True)
    args, env = [], None
    if mode == "auto":
        config = directory / "gemshare.toml"
        config.write_text(TRAINER_RULE)
        args = ["--mps", "--config", str(config)]
        env = {**os.environ, "PATH": f"{FAKE_MPS}:{os.environ['PATH']}"}
    scheduler = SchedulerProcess(directory, env=env, anti_thrash=mode, tq=setup.tq, args=args)
    gpu = FakeGpu(directory, scheduler.socket)
    try:
        if mode == "auto":  # programs that register before its daemon answers run plain
            wait_for(lambda: scheduler_status(scheduler.socket)["mps"]["running"],
                     "the MPS control daemon to answer")
        busy = gpu.start(setup.busy_steps(), env={"GEMSHARE_LABEL": "trainer"})
        wait_for_client(scheduler.socket, busy.pid, state="holding")
        cells = notebooks(gpu, setup, True, {})
        still_busy = busy.process.poll() is None
        scheduler.check_running()
    finally:
        gpu.stop_all()
        scheduler.stop()
    # How each program's driver started: through which MPS pipe, at which priority.
    started = [(event.pid == busy.pid, event["mps_pipe"], event["mps_priority"])
               for event in fakelog.named(gpu.events(), "init")]
    return {**summary(cells), "busy_outlived_cells": still_busy, "drivers": started,
            "log": scheduler.log_path.read_text()}
