"""What NVML says each process uses on each GPU, and how much of a client's memory report is
believed against it: pure bookkeeping over the lists the shell reads (service/gpus.py).

A process with a CUDA context on a GPU is in NVML's list of that GPU's processes, with the
device memory it uses (its context, and what it allocated outside managed memory: the driver
does not count managed memory per process, so a program under libnvs, whose allocations are
managed, shows little more than its context). So, of a client's MEM_REPORT for a device:

- a client whose process NVML does not list there has no memory there at all: its report is
  refused (counted as 0). This is what stops a client that speaks the protocol without a GPU
  context from making others move their memory out for room it will never use;
- a report far below what NVML says the process uses (less a context, less MARGIN) is refused
  too: its memory is counted as NVML's figure less a context, so that a client cannot fit
  beside others by under-reporting;
- a report above NVML's figure and the managed memory the process has mapped (its mappings of
  the UVM device in /proc/PID/maps, which the driver makes for each managed allocation, of its
  size, touched or not), plus MARGIN, is refused too: it counts as that ceiling. A process whose
  mappings cannot be read (another user's, to a scheduler that is not root) is believed up to the
  device's total (capacity.py), as before. The mappings are the process's, not a device's: a
  process on several GPUs may claim all of its managed memory on each.

The check applies once NVML has listed a registered client's process (`armed`): a scheduler
whose pids are not NVML's (in another pid namespace than the node's) never sees its clients
there, and believes the reports as before rather than refusing every one. A report that comes
before the list shows its process counts as 0 until the next list, which is read at once
(ProcessWatch): a program's context is made before it allocates.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20
MARGIN = 256 * MIB  # allocators' slack, and what a list read a moment earlier may miss
NOT_LISTED, BELOW_NVML, ABOVE_MAPPED = "not_on_device", "below_nvml", "above_mapped"
REFUSALS = (NOT_LISTED, BELOW_NVML, ABOVE_MAPPED)
# A report above the mappings is confirmed (logged, counted) only by a list read this long
# after it: one that a free made stale is replaced by then (libnvs reports every 100 ms). On an
# H200 a PyTorch program's report of 13.0 GiB was 0.4 GB above a list read just after it.
ABOVE_MAPPED_CONFIRM_S = 0.5


def confirm_after(why: str | None) -> float:
    """How long after a report a list must have been read to confirm its refusal `why`."""
    return ABOVE_MAPPED_CONFIRM_S if why == ABOVE_MAPPED else 0.0


@dataclass(frozen=True)
class GpuProcess:
    """One process of NVML's list for a GPU, with what the shell read of it in /proc."""
    pid: int
    used_bytes: int  # 0 where NVML does not say
    name: str = ""
    uid: int | None = None
    managed_bytes: int | None = None  # its mappings of the UVM device; None where unreadable

    @property
    def ceiling(self) -> int | None:
        """The most a report of this process is believed on the device, None where its
        mappings could not be read."""
        if self.managed_bytes is None:
            return None
        return self.used_bytes + self.managed_bytes + MARGIN


class Listing:
    """The last processes NVML listed, by the scheduler's device index."""

    def __init__(self) -> None:
        self.devices: dict[int, dict[int, GpuProcess]] = {}  # devices NVML could list
        self.armed = False

    def update(self, devices: dict[int, dict[int, GpuProcess]], clients: set[int]) -> None:
        """A new list; `clients`: the pids of the registered clients."""
        self.devices = devices
        if not self.armed:
            self.armed = any(pid in clients for processes in devices.values()
                             for pid in processes)

    def lists(self, pid: int, device: int) -> bool:
        """Whether the check applies and the last list shows `pid` on the device."""
        return self.armed and pid in self.devices.get(device, {})

    def believed(self, pid: int, device: int, reported: int,
                 reserve: int) -> tuple[int, str | None]:
        """(the bytes believed of a report, why the report was refused or None)."""
        processes = self.devices.get(device)
        if not self.armed or processes is None:
            return reported, None
        found = processes.get(pid)
        if found is None:
            return 0, NOT_LISTED if reported > 0 else None
        floor = found.used_bytes - reserve
        if reported < floor - MARGIN:
            return floor, BELOW_NVML
        ceiling = found.ceiling
        if ceiling is not None and reported > ceiling:
            return ceiling, ABOVE_MAPPED
        return reported, None

    def unregistered(self, known: set[int]) -> dict[int, list[GpuProcess]]:
        """Device -> the processes listed there that are not among `known` pids."""
        return {device: [found for pid, found in sorted(processes.items()) if pid not in known]
                for device, processes in self.devices.items()
                if any(pid not in known for pid in processes)}


class Unregistered:
    """The processes listed on a GPU that are no client: each counts once it has been listed
    for `after_s`, and is told of once while it stays."""

    def __init__(self, after_s: float = 2.0) -> None:
        self.after_s = after_s
        self.now: dict[int, list[GpuProcess]] = {}  # device -> those that count now
        self._since: dict[tuple[int, int], float] = {}  # (device, pid) -> first listed
        self._told: set[tuple[int, int]] = set()

    def seen(self, listed: dict[int, list[GpuProcess]], now: float) -> list[tuple[int, GpuProcess]]:
        """A new list of them (Listing.unregistered); those to be told of now."""
        keys = {(device, found.pid) for device, processes in listed.items()
                for found in processes}
        self._since = {key: self._since.get(key, now) for key in keys}
        self._told &= keys  # one that comes back is told of again
        self.now, tell = {}, []
        for device, processes in listed.items():
            for found in processes:
                key = (device, found.pid)
                if now - self._since[key] < self.after_s:
                    continue
                self.now.setdefault(device, []).append(found)
                if key not in self._told:
                    self._told.add(key)
                    tell.append((device, found))
        return tell


def refusal_words(why: str, device: int, reported: int, believed: int) -> str:
    if why == NOT_LISTED:
        return (f"reports {reported} bytes on device {device}, where NVML lists no process of "
                "its: refused, counted as 0 (its later refusals are not logged)")
    if why == ABOVE_MAPPED:
        return (f"reports {reported} bytes on device {device}, more than NVML's figure and the "
                f"managed memory its process has mapped bear out: counted as {believed} bytes "
                "(its later refusals are not logged)")
    return (f"reports {reported} bytes on device {device}, far below the {believed} bytes NVML "
            "says it uses beyond a context: counted as NVML's (its later refusals are not "
            "logged)")
