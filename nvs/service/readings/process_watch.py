"""NVML's processes of each GPU, read for the policy core once a second, and at once when a
memory report comes from a process the last list did not show (a program's context is made
just before it allocates): the core checks memory reports against them and notices GPU users
that are no clients (core/rules/checks/claim_rules.py).

The reading (NVML, /proc) is blocking and runs in a thread. The scheduler's own process and
NVIDIA's MPS server (which the MPS control daemon starts, and whose clients NVML lists on their
own) are left out: they are not programs to schedule.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import trio

from ...core.rules.checks.claims import GpuProcess
from ..gpus import Gpus

PROC = Path("/proc")
POLL_S = 1.0
SOONEST_S = 0.1  # between two reads, however often they are asked for
MPS_SERVER = "nvidia-cuda-mps-server"


def process_facts(proc: Path, pid: int) -> tuple[str, int | None]:
    """A process's name and real uid, from /proc; ("", None) where they cannot be read (a
    process in another pid namespace, or gone)."""
    try:
        name = (proc / str(pid) / "comm").read_text(errors="replace").strip()
        for line in (proc / str(pid) / "status").read_text(errors="replace").splitlines():
            if line.startswith("Uid:"):
                return name, int(line.split()[1])
        return name, None
    except (OSError, ValueError, IndexError):
        return "", None


class ProcessWatch:
    def __init__(self, gpus: Gpus, proc: Path = PROC):
        self.gpus = gpus
        self.proc = proc
        self.listed: set[int] = set()  # the pids of the last list
        self._wanted = trio.Event()

    def want(self, pid: int) -> None:
        """A memory report from `pid`: a new list soon, if the last did not show it."""
        if pid not in self.listed:
            self._wanted.set()

    async def watch(self, take: Callable[[dict[int, dict[int, GpuProcess]], float], None]) -> None:
        """Read the lists until cancelled, giving each to `take` with when its reading began."""
        while True:
            self._wanted = trio.Event()
            read_at = trio.current_time()
            devices = await trio.to_thread.run_sync(self.read, abandon_on_cancel=True)
            self.listed = {pid for processes in devices.values() for pid in processes}
            take(devices, read_at)
            await trio.sleep(SOONEST_S)
            with trio.move_on_after(POLL_S - SOONEST_S):
                await self._wanted.wait()

    def read(self) -> dict[int, dict[int, GpuProcess]]:
        """Blocking: each GPU's processes NVML lists, with their names and uids."""
        own = os.getpid()
        devices = {}
        for device, processes in self.gpus.processes().items():
            devices[device] = {}
            for pid, used in processes.items():
                name, uid = process_facts(self.proc, pid)
                if pid != own and name != MPS_SERVER:
                    devices[device][pid] = GpuProcess(pid, used, name, uid)
        return devices
