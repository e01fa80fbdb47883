"""Which clients may hold one device's lock together: the memory rule behind mode `auto`.

Pure functions over numbers; policy.py feeds them its state and carries out the answer. The
rules themselves are stated in policy.py's docstring.

A `Budget` is one device as one decision sees it. A set of holders fits when it has a single
member (one program may always run alone, even past the capacity: Unified Memory lets it), or
when the capacity is known and the members' allocated bytes plus one context reserve each stay
within it. Mode `on`, and `auto` on a device of unknown capacity, use a budget without a
capacity: one holder at a time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Budget:
    capacity: int | None  # bytes; None when unknown (or not wanted, as in mode `on`)
    reserve: int  # bytes set aside per holder for its CUDA context

    def fits(self, total: int, count: int) -> bool:
        """Whether `count` holders with `total` allocated bytes between them may run together."""
        if count <= 1:
            return True
        return self.capacity is not None and total + self.reserve * count <= self.capacity


@dataclass(frozen=True)
class Waiting:
    id: int
    size: int  # allocated bytes on the device
    waited: float  # seconds since it asked
    blocked: bool = False  # it may not be granted yet whatever fits (its gang is not ready)


def kept(budget: Budget, holders: list[tuple[int, int]]) -> list[int]:
    """Of the holders (id, bytes), oldest grant first, those that keep the lock.

    Each in turn stays if it fits beside the ones kept before it, so the oldest always stays and
    a holder that grew past the room left is let go while smaller, younger ones may stay.
    """
    keep, total = [], 0
    for cid, size in holders:
        if budget.fits(total + size, len(keep) + 1):
            keep.append(cid)
            total += size
    return keep


def admitted(budget: Budget, holding: list[int], waiters: Iterable[Waiting],
             patience: float) -> list[int]:
    """Ids of the waiters (first come first) to grant now beside holders of sizes `holding`.

    Each waiter in turn is admitted if it fits beside the holders and those admitted before it.
    One that does not fit, or is blocked, is passed over only while it has waited less than
    `patience` seconds (the time quantum); from then on nobody behind it is admitted until it is.
    """
    chosen, total, count = [], sum(holding), len(holding)
    for waiter in waiters:
        if not budget.fits(total, count + 1):
            break  # not even an empty client fits: stop before walking a long queue
        if not waiter.blocked and budget.fits(total + waiter.size, count + 1):
            chosen.append(waiter.id)
            total += waiter.size
            count += 1
        elif waiter.waited >= patience:
            break
    return chosen
