"""Running totals of what the policy core has done, kept for reports such as the metrics.

The policy core keeps what its rules need; these are what an operator wants to count besides:
how each hold ended, how long granted waits took, evictions asked and bytes moved. Each update
is O(1) (a wait's bucket is found by bisection over a fixed handful), so counting never slows
the rules. Per-client totals are forgotten when the client leaves, so what is kept stays
bounded by the clients connected and the devices used.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field

# Upper bounds, in seconds, of the wait-histogram buckets: from a handoff on one machine (about
# a millisecond) to several long quanta (5 minutes); longer waits fall in the last, open bucket.
WAIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                30.0, 60.0, 120.0, 300.0)
TO_HOST, TO_DEVICE = "to_host", "to_device"


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
    evictions: Counter = field(default_factory=Counter)  # device -> EVICTs sent
    moved: Counter = field(default_factory=Counter)  # (device, TO_HOST or TO_DEVICE) -> bytes
    # (client, device) -> seconds of its finished holds there; forgotten when it leaves
    held: Counter = field(default_factory=Counter)
    _devices_of: dict[int, set[int]] = field(default_factory=dict)  # client -> devices in held

    def hold_ended(self, device: int, cid: int, seconds: float, why: str) -> None:
        self.ended[device, why] += 1
        self.held[cid, device] += seconds
        self._devices_of.setdefault(cid, set()).add(device)

    def waited(self, device: int, seconds: float) -> None:
        """A wait in the queue that ended in a grant."""
        self.waits.setdefault(device, WaitHistogram()).add(seconds)

    def evicted(self, device: int) -> None:
        self.evictions[device] += 1

    def moved_bytes(self, device: int, to_host: bool, size: int) -> None:
        self.moved[device, TO_HOST if to_host else TO_DEVICE] += size

    def held_by(self, cid: int) -> dict[int, float]:
        """device -> seconds of the client's finished holds there."""
        return {device: self.held[cid, device] for device in self._devices_of.get(cid, ())}

    def forget(self, cid: int) -> None:
        """The client left: its own totals go (the per-device ones stay)."""
        for device in self._devices_of.pop(cid, ()):
            del self.held[cid, device]
