"""The submission path makes no system call, also now that the client thread pings a scheduler
while the process holds the lock: under strace, the launching thread of a program that holds
the lock makes as many system calls for 200,000 launches as for 20,000 (the fake driver refuses
them after its argument checks, so the driver adds none either). Counting system calls, not
time: behaviour, not speed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from libnvs_programs import BUILD, grants

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import hook_cost  # noqa: E402  (builds bench/cpu/launch_cost.c, the launch loop)

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="no strace")


def main_thread_syscalls(gpu, binary: Path, launches: int, tmp_path: Path) -> tuple[int, int]:
    """(the program's pid, how many system calls its main thread made)."""
    prefix = tmp_path / f"trace-{launches}"
    env = gpu.env(extra={"GEMSHARE_IDLE_RELEASE_MS": "0"})
    done = subprocess.run(["strace", "-f", "-ff", "-qq", "-o", str(prefix), str(binary),
                           "rejected", str(launches)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    pid = min(int(path.suffix[1:]) for path in tmp_path.glob(f"{prefix.name}.*"))
    return pid, len(Path(f"{prefix}.{pid}").read_text().splitlines())


def test_launches_while_holding_the_lock_make_no_system_call(gpu_with, tmp_path):
    gpu, scheduler = gpu_with(tq=86400)
    binary = hook_cost.build(BUILD)
    first, few = main_thread_syscalls(gpu, binary, 20_000, tmp_path)
    second, many = main_thread_syscalls(gpu, binary, 200_000, tmp_path)
    # Each took the lock once and launched with it held.
    assert grants(scheduler.log(), first) == grants(scheduler.log(), second) == 1, \
        scheduler.log()
    # Anything per launch would add 180,000; the two runs differ only by chance (a page fault
    # of a larger run's memory, a signal), by a handful.
    assert abs(many - few) < 100, (few, many)
