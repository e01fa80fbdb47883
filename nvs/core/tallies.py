"""Running totals of what the policy core has done, kept for reports such as the metrics.

The policy core keeps what its rules need; these are what an operator wants to count besides:
how each hold ended, how long granted waits took, memory asked off a device (evictions) and
bytes moved. Each update is O(1) (a wait's bucket is found by bisection over a fixed handful),
so counting never slows the rules.

Lock time is kept per series, not per client: a series is what people group programs by (their
pod's namespace and name, their container, their process name, their GEMSHARE_LABEL), never a
pid or a connection, so that a program that restarts, or a thousand short ones, add to one
series rather than each making its own. A series' time is forgotten when the last client in it
leaves, so what is kept stays bounded by the clients connected and the devices used.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

from .model.state import Registration

# Upper bounds, in seconds, of the wait-histogram buckets: from a handoff on one machine (about
# a millisecond) to several long quanta (5 minutes); longer waits fall in the last, open bucket.
WAIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                30.0, 60.0, 120.0, 300.0)
TO_HOST, TO_DEVICE = "to_host", "to_device"


class Series(NamedTuple):
    """Who a client counts as in the per-client metrics."""
    namespace: str
    pod: str
    process: str
    label: str
    container: str = ""  # its Kubernetes container's name, where the node says


def series_of(registration: Registration, label: str) -> Series:
    return Series(registration.namespace, registration.pod, registration.name, label,
                  registration.container)


@dataclass
class WaitHistogram:
    """Waits counted per bucket (not cumulative: `cumulative` makes them so), with their sum."""
    counts: list[int] = field(default_factory=lambda: [0] * (len(WAIT_BUCKETS) + 1))
    total: float = 0.0

    def add(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        self.counts[bisect_left(WAIT_BUCKETS, seconds)] += 1
        self.total += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, waits at most that long) per bucket, the open one last (inf)."""
        running, out = 0, []
        for bound, count in zip((*WAIT_BUCKETS, float("inf")), self.counts):
            running += count
            out.append((bound, running))
        return out


@dataclass
class Tallies:
    # (device, why) -> holds that ended so, `why` as status names it (policy.py's reasons)
    ended: Counter = field(default_factory=Counter)
    waits: dict[int, WaitHistogram] = field(default_factory=dict)  # device -> granted waits
    # device -> clients asked to move memory to the host: by EVICT, or by a drop that moves some
    evictions: Counter = field(default_factory=Counter)
    moved: Counter = field(default_factory=Counter)  # (device, TO_HOST or TO_DEVICE) -> bytes
    # (device, why) -> memory reports refused against NVML's list (checks/claims.py's reasons)
    refused_reports: Counter = field(default_factory=Counter)
    unregistered: Counter = field(default_factory=Counter)  # device -> GPU users not clients
    # (series, device) -> seconds of finished holds there; forgotten when the series empties
    held: Counter = field(default_factory=Counter)
    _devices_of: dict[Series, set[int]] = field(default_factory=dict)  # series -> its devices
    _members: Counter = field(default_factory=Counter)  # series -> clients connected in it

    def joined(self, series: Series) -> None:
        """A client of `series` connected."""
        self._members[series] += 1

    def left(self, series: Series) -> None:
        """A client of `series` left; with the last one, the series' own totals go (the
        per-device ones stay)."""
        self._members[series] -= 1
        if self._members[series] > 0:
            return
        del self._members[series]
        for device in self._devices_of.pop(series, ()):
            del self.held[series, device]

    def renamed(self, before: Registration, after: Registration, label: str) -> None:
        """A connected client is known by another name (the node named its pod late)."""
        self.left(series_of(before, label))
        self.joined(series_of(after, label))

    def hold_ended(self, device: int, series: Series, seconds: float, why: str) -> None:
        self.ended[device, why] += 1
        self.held[series, device] += seconds
        self._devices_of.setdefault(series, set()).add(device)

    def waited(self, device: int, seconds: float) -> None:
        """A wait in the queue that ended in a grant."""
        self.waits.setdefault(device, WaitHistogram()).add(seconds)

    def refused_report(self, device: int, why: str) -> None:
        self.refused_reports[device, why] += 1

    def unregistered_user(self, device: int) -> None:
        self.unregistered[device] += 1

    def evicted(self, device: int) -> None:
        self.evictions[device] += 1

    def moved_bytes(self, device: int, to_host: bool, size: int) -> None:
        self.moved[device, TO_HOST if to_host else TO_DEVICE] += size

    def held_by(self, series: Series) -> dict[int, float]:
        """device -> seconds of the series' finished holds there."""
        return {device: self.held[series, device] for device in self._devices_of.get(series, ())}
