"""NVML's processes of each GPU, read for the policy core once a second, and at once when a
memory report comes from a process the last list did not show (a program's context is made
just before it allocates): the core checks memory reports against them and notices GPU users
that are no clients (core/rules/checks/claim_rules.py).

With each process goes the managed memory it has mapped: the sizes of its mappings of the UVM
device in /proc/PID/maps (one a managed allocation, the driver's), which bound what its reports
are believed (claims.py). A process whose maps the scheduler may not read (another user's, to a
scheduler that is not root) has none read, and its reports are not bounded by them.

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
UVM_MAPPING = "/dev/nvidia-uvm"  # the path a managed allocation's mapping shows in maps
# Names another path in its stead: the fake driver's (tests/fakecuda), whose managed memory is
# a memfd's mapping, where no /dev/nvidia-uvm can be.
UVM_MAPPING_VARIABLE = "GEMSHARE_UVM_MAPPING"


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


def mapped_bytes(proc: Path, pid: int, mapping: str) -> int | None:
    """The bytes of a process's mappings whose path is `mapping`; None where its maps cannot
    be read (not the scheduler's to read, or gone)."""
    try:
        maps = (proc / str(pid) / "maps").read_text(errors="replace")
    except OSError:
        return None
    total = 0
    for line in maps.splitlines():  # a PyTorch process has thousands: only the UVM ones split
        if not line.endswith(mapping):
            continue
        fields = line.split(maxsplit=5)  # range, perms, offset, dev, inode, path
        if len(fields) == 6 and fields[5] == mapping:
            start, _, end = fields[0].partition("-")
            try:
                total += int(end, 16) - int(start, 16)
            except ValueError:
                continue
    return total


class ProcessWatch:
    def __init__(self, gpus: Gpus, proc: Path = PROC, uvm_mapping: str = UVM_MAPPING):
        self.gpus = gpus
        self.proc = proc
        self.uvm_mapping = uvm_mapping
        self.listed: dict[int, int | None] = {}  # the pids of the last list -> their ceiling
        self._wanted = trio.Event()

    def want(self, pid: int, reported: int) -> None:
        """A memory report of `reported` bytes from `pid`: a new list soon, if the last did not
        show it or does not bear that much out (a program that allocated since)."""
        ceiling = self.listed.get(pid, 0)
        if pid not in self.listed or (ceiling is not None and reported > ceiling):
            self._wanted.set()

    async def watch(self, take: Callable[[dict[int, dict[int, GpuProcess]], float], None]) -> None:
        """Read the lists until cancelled, giving each to `take` with when its reading began."""
        while True:
            self._wanted = trio.Event()
            read_at = trio.current_time()
            devices = await trio.to_thread.run_sync(self.read, abandon_on_cancel=True)
            # A process's mappings are the same on each GPU: its highest ceiling there, or
            # None on all of them where they could not be read.
            self.listed = {}
            for processes in devices.values():
                for pid, found in processes.items():
                    if found.ceiling is None or self.listed.get(pid, 0) is None:
                        self.listed[pid] = None
                    else:
                        self.listed[pid] = max(found.ceiling, self.listed.get(pid, 0))
            take(devices, read_at)
            await trio.sleep(SOONEST_S)
            with trio.move_on_after(POLL_S - SOONEST_S):
                await self._wanted.wait()

    def read(self) -> dict[int, dict[int, GpuProcess]]:
        """Blocking: each GPU's processes NVML lists, with their names and uids."""
        own = os.getpid()
        devices, facts = {}, {}  # facts: pid -> (name, uid, mapped), read once for all its GPUs
        for device, processes in self.gpus.processes().items():
            devices[device] = {}
            for pid, used in processes.items():
                if pid not in facts:
                    facts[pid] = (*process_facts(self.proc, pid),
                                  mapped_bytes(self.proc, pid, self.uvm_mapping))
                name, uid, mapped = facts[pid]
                if pid != own and name != MPS_SERVER:
                    devices[device][pid] = GpuProcess(pid, used, name, uid, mapped)
        return devices
