"""The interface every stage of the policy core's decision pipeline implements (pipeline.py
lists the stages in precedence order and says how they are asked).

A stage is one rule with its own state. It is made for one policy, whose devices and clients it
reads and whose grants and drops it asks for; it keeps no copy of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .decision import Decision
from .state import Device, Hold, Wait

# The policy a stage is made for (policy.Policy): handed in, as rules never import it.
Policy = Any


@dataclass(frozen=True)
class Keep:
    """An answer of `end_turn`: the holder keeps the device past the turns that the stages
    below this one end for waiters."""
    decision: Decision


@dataclass(frozen=True)
class Placement:
    """An answer of `arrive` or `queue`: the stage placed the waiter (`decision`; None where it
    left it where it was and only acted on the holders), and what that did."""
    decision: Decision | None
    words: str  # for the request's log line
    actions: list


class Stage:
    """One rule of the policy core. Every question has a default answer: this stage has no say."""
    name = ""
    # Its turn ends are for a waiter's sake: a Keep from a stage above shields them.
    for_waiters = False

    def __init__(self, policy: Policy):
        self.policy = policy

    def arrive(self, dev: Device, cid: int, now: float) -> Placement | None:
        """A request comes in, before the device settles: whether this stage places it."""
        return None

    def queue(self, dev: Device, cid: int, now: float) -> Placement | None:
        """The request waits behind someone, and no stage placed it on arrival."""
        return None

    def eligible_at(self, device: int, cid: int) -> float | None:
        """When the waiter may be granted, if this stage says (-inf: at once)."""
        return None

    def holds_back(self, dev: Device, cid: int, now: float) -> Decision | None:
        """Why the waiter may not be granted yet, if this stage is why."""
        return None

    def grants(self, dev: Device, cid: int, wait: Wait, now: float) -> Decision | None:
        """Why the waiter is granted now, if this stage is why."""
        return None

    def end_turn(self, dev: Device, cid: int, hold: Hold, first: int | None,
                 now: float) -> Decision | Keep | None:
        """Whether the holder's turn ends now (`first`: the first waiter that may be granted
        now, if any)."""
        return None

    def forget_device(self, index: int) -> None:
        """The policy forgot the device (nobody uses it): what this stage kept for it goes."""

    def forget_client(self, cid: int) -> None:
        """The client left."""
