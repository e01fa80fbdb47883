"""Each bench-gpu part of the scenario registry run through its own code without a GPU: the GPU
programs replaced by the stand-ins of tests/bench/standins/ (same command lines, same output,
no CUDA), real schedulers where the part starts them, and only what needs a GPU or an MPS
daemon (nvidia-smi's free memory, the MPS loops, the second GPU's jobs) answered here. What
comes out has the part's keys, made by the part's code; its figures mean nothing."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import beside_trainer  # noqa: E402
import classroom  # noqa: E402
import llm_servers  # noqa: E402
import memory_limit  # noqa: E402
import mps  # noqa: E402
import multi_gpu  # noqa: E402
import notebooks  # noqa: E402
import oversub  # noqa: E402
from ab import interleave  # noqa: E402

STANDINS = Path(__file__).resolve().parent / "standins"
FAKE_MPS = REPO / "tests" / "fake_mps"
PYTHON = sys.executable
LIBRARY = Path("/nonexistent/libnvs.so")  # the stand-ins load no CUDA, so nothing needs it
FREE = [143000]  # an H200's free MiB


def printing(metric: str) -> list[str]:
    return [PYTHON, "-c", f"import json; print(json.dumps({{{metric!r}: 100.0}}))"]


def launch_rate(directory: Path, patch) -> dict:
    return interleave(printing("launches_per_s"), "launches_per_s", 2, {}, {})


def train_steps(directory: Path, patch) -> dict:
    return interleave(printing("steps_per_s"), "steps_per_s", 2, {}, {})


def beside(directory: Path, patch) -> dict:
    patch.setattr(beside_trainer, "HERE", STANDINS)
    patch.setattr(beside_trainer, "TRAINER_ALONE_S", 0.3)
    patch.setattr(beside_trainer, "free_mib", lambda: FREE)
    chosen = {**beside_trainer.settings({"BESIDE_BURSTS": "2", "BESIDE_MODES": "on"}),
              "gap_s": 0.1}
    return beside_trainer.measure(PYTHON, LIBRARY, directory, chosen)


def lesson(directory: Path, patch) -> dict:
    patch.setattr(classroom, "HERE", STANDINS)
    patch.setattr(classroom, "TRAINER_ALONE_S", 0.3)
    patch.setattr(classroom, "START_MARGIN_S", 0.3)
    patch.setattr(classroom, "free_mib", lambda: FREE)
    patch.setenv("PATH", f"{FAKE_MPS}:{os.environ['PATH']}")  # the scheduler's --mps daemon
    chosen = classroom.settings({"CLASSROOM_PROGRAMS": "3", "CLASSROOM_BURSTS": "2",
                                 "CLASSROOM_PERIOD_S": "0.3"})
    return classroom.measure(PYTHON, LIBRARY, directory, chosen)


def pair(directory: Path, patch) -> dict:
    patch.setattr(oversub, "WORKLOAD", STANDINS / "oversub_pass.py")
    patch.setattr(oversub, "START_GAP_S", 0.05)
    patch.setattr(oversub, "free_mib", lambda: FREE)
    for name, value in {"OVERSUB_GAPS": "0,0.2,1", "OVERSUB_PASSES": "2", "OVERSUB_GIB": "1",
                        "OVERSUB_CAPACITY_MIB": "1024"}.items():
        patch.setenv(name, value)
    return oversub.measure(PYTHON, LIBRARY, directory)


def cells(directory: Path, patch) -> dict:
    patch.setattr(notebooks, "WORKLOAD", STANDINS / "notebook_cells.py")
    patch.setattr(notebooks, "free_mib", lambda: [400000])  # 8 x 6 and 4 x 12 under half
    for name, value in {"NOTEBOOKS_SETS": "4x12,8x6", "NOTEBOOKS_CELLS": "2",
                        "NOTEBOOKS_PERIOD_S": "0.1"}.items():
        patch.setenv(name, value)
    return notebooks.measure(PYTHON, LIBRARY, directory)


class StandInCgroup:
    """A memory cgroup as the part uses one, where the runner may have none to give: it starts
    the programs as they are and has seen 1 GiB at its peak, no OOM kill."""

    def limit(self, size: int) -> None:
        self.limited = size

    def wrap(self, command: list[str]) -> list[str]:
        return command

    def peak(self) -> int:
        return 1 << 30

    def oom_kills(self) -> int:
        return 0

    def remove(self) -> None:
        pass


def limited(directory: Path, patch) -> dict:
    patch.setattr(notebooks, "WORKLOAD", STANDINS / "notebook_cells.py")
    patch.setattr(memory_limit, "free_mib", lambda: FREE)
    patch.setattr(memory_limit.memory_cgroup, "create", lambda: (StandInCgroup(), ""))
    return memory_limit.measure(PYTHON, LIBRARY, directory,
                                {**memory_limit.settings(), "cells": 2, "period_s": 0.1})


def loops(directory: Path, patch) -> dict:
    """The loops' setups and their rates are the GPU's: each setup's four loops answer a rate
    of its own, and the part's code makes the figures."""
    @contextmanager
    def no_setup(name, library, where, **scheduler):
        yield {}, None

    def rate(python, env, where, count, model, sched, extra=()):
        rate = 200.0 if where.parent.name.startswith("auto_mps") else 190.0
        return {"rate": rate, "median_ms": 0.6, "p99_ms_max": 1.1, "slowest_over_fastest": 0.9,
                "through_mps": count}

    patch.setattr(mps, "setup", no_setup)
    patch.setattr(mps, "loops", rate)
    patch.setenv("MPS_ONLY", "loops")
    patch.setenv("MPS_SETUPS", "mps,auto_mps")
    return mps.measure(PYTHON, LIBRARY, directory)


def two_gpus(directory: Path, patch) -> dict:
    def run_all(commands, env, where):
        return 1.0, [{"steps_per_s": 10.0, "ranks_agree": True} for _ in commands]

    patch.setattr(multi_gpu, "gpu_count", lambda: 2)
    patch.setattr(multi_gpu, "run_all", run_all)
    return multi_gpu.measure(PYTHON, LIBRARY, directory)


def servers(directory: Path, patch) -> dict:
    patch.setattr(llm_servers, "WORKLOAD", STANDINS / "llm_server.py")
    patch.setattr(llm_servers, "free_mib", lambda: FREE)
    # The stand-ins need no PyTorch; vLLM is absent, so its run is skipped, as without it.
    patch.setattr(llm_servers, "missing", lambda python, modules, what: None
                  if modules != "vllm" else f"{what} is not installed for {python}")
    for name, value in {"LLM_REQUESTS": "2", "LLM_IDLE_S": "0.2,0.4"}.items():
        patch.setenv(name, value)
    return llm_servers.measure(PYTHON, LIBRARY, directory)


RUNS = {"launch_rate": launch_rate, "train_steps": train_steps, "beside_trainer": beside,
        "classroom": lesson, "oversub": pair, "notebooks": cells, "memory_limit": limited,
        "mps": loops,
        "multi_gpu": two_gpus, "llm_servers": servers}


def run_part(part: str, directory: Path) -> dict:
    """The part's result, as bench/run_gpu.py stores it under `results[part]`."""
    with pytest.MonkeyPatch.context() as patch:
        return RUNS[part](directory, patch)
