"""How much host memory the programs' staging memory may take, all of them together, and what
part of its share of the overflow each program is told to prepare (IDLE_HINT's evict_bytes,
room_rules.py), as part of the policy core.

The budget is the operator's setting (`staging_max_mib`; none by default) and never more than
the host has available beside what staging was told to hold already, less the floor libnvs keeps
free (a sixteenth of the host's memory, at least 128 MiB; libnvs/memory/host_room.c). The shell
reads the host's memory once a second (service/readings/host_memory.py). When the programs' shares of the
overflow add up to more than the budget, each is told the same fraction of its share, in whole
sixteenths, so that the first programs to ask do not take it all and leave the later ones to the
driver's migration; what a program is not told to prepare it moves by migration. libnvs still
checks its own process's headroom before it faults a page in: this is the node's plan, not its
only guard.
"""

from __future__ import annotations

from dataclasses import dataclass

from .residency import PAGE

FLOOR_SHARE = 16  # libnvs keeps this fraction of the host's memory free (host_room.c)
FLOOR_MIN = 128 << 20
STEPS = 16  # the fraction told moves in sixteenths: host memory changes a little every second


@dataclass(frozen=True)
class HostMemory:
    available: int  # bytes the kernel can hand out without swapping (MemAvailable)
    total: int


class StagingBudget:
    def __init__(self, limit: int | None = None):
        self.limit = limit  # the operator's bound; None: only the host's memory bounds it
        self.host: HostMemory | None = None  # None until the shell read it
        self.steps = STEPS  # the fraction of its share each program is told, in sixteenths

    def budget(self, told: int) -> int | None:
        """Bytes all programs' staging may take, when programs were told to prepare `told` bytes
        (held already, as far as they took it, so out of what the host has available: a host
        that has less than the floor free takes some of it back); None where nothing bounds
        it."""
        bounds = [] if self.limit is None else [self.limit]
        if self.host is not None:
            floor = max(self.host.total // FLOOR_SHARE, FLOOR_MIN)
            bounds.append(max(self.host.available + told - floor, 0))
        return min(bounds) if bounds else None

    def settle(self, wanted: int, told: int) -> bool:
        """Weighs the fraction again for shares adding up to `wanted` bytes, with `told` bytes
        told so far; True when it changed."""
        budget = self.budget(told)
        if budget is None or wanted <= budget:
            steps = STEPS
        else:
            steps = budget * STEPS // wanted
        changed = steps != self.steps
        self.steps = steps
        return changed

    def bounding(self) -> bool:
        """Whether the programs are told less than their shares."""
        return self.steps < STEPS

    def part(self, share: int) -> int:
        """What of a program's share of the overflow it is told to prepare: the fraction, in
        whole pages."""
        if self.steps >= STEPS:
            return share
        return share * self.steps // STEPS // PAGE * PAGE

    def view(self, wanted: int, told: int) -> dict:
        budget = self.budget(told)
        return {"limit_bytes": self.limit,
                "host_available_bytes": self.host.available if self.host else None,
                "budget_bytes": budget, "wanted_bytes": wanted, "told_bytes": told,
                "fraction": self.steps / STEPS}
