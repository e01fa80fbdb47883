"""The rules of shares and limits, as two stages of the policy core's decision pipeline
(pipeline.py): `shares` says how long a holder's turn lasts beside the waiters (weights, the
minimum slice) and lets a waiter under its share go ahead and cut the holder's turn short;
`limits` says who may be granted when, and who is dropped, for a gpu_limit.

Each stage keeps the clients it must look at (those of other weights than 1, those with a
limit), so that a long queue is not walked; they read the policy's clients, devices and usage
and call its settling and its room rules. The pure arithmetic is in shares.py.
"""

from __future__ import annotations

import math

from ..model.actions import Log
from ..model.decision import DROPPED, GRANTED, WAITS, Decision
from ..model.stage import Placement, Stage
from ..model.state import Device, Hold, Wait
from ..model.terms import Terms
from ..model.text import GPU_LIMIT, SHARE
from .shares import clearly_under, limit_levels, minimum_slice, turn_length, weighted

SHARES, LIMITS = "shares", "limits"
# A waiter that went ahead of busier ones, or had a busier holder drop for it.
CLAIMED = Decision(SHARES, WAITS, "under its share, ahead of busier clients")


def _placed_by_shares(wait: Wait) -> bool:
    return wait.placed_by is not None and wait.placed_by.stage == SHARES


class ShareStage(Stage):
    name = SHARES
    for_waiters = True

    def __init__(self, policy):
        super().__init__(policy)
        self.weighted: set[int] = set()  # clients whose weight is not 1, or is a container's

    # ----- the stage's answers ----------------------------------------------------------------

    def queue(self, dev: Device, cid: int, now: float) -> Placement | None:
        placed, actions = self.claim(dev, cid, now)
        if not placed and not actions:
            return None
        return Placement(CLAIMED, "", actions)

    def holds_back(self, dev: Device, cid: int, now: float) -> Decision | None:
        for other in dev.waiters:
            if other == cid:
                return None
            if _placed_by_shares(dev.waiters[other]):
                return Decision(self.name, WAITS, "behind a waiter under its share")
        return None

    def grants(self, dev: Device, cid: int, wait: Wait, now: float) -> Decision | None:
        return Decision(self.name, GRANTED, "under its share") if _placed_by_shares(wait) \
            else None

    def end_turn(self, dev: Device, cid: int, hold: Hold, first: int | None, now: float):
        if first is not None and now >= hold.preempt_at:
            return Decision(self.name, DROPPED, "slice over for a waiter under its share", SHARE,
                            f"slice over for {self.policy.clients[first]}, under its share")
        return None

    def forget_client(self, cid: int) -> None:
        self.weighted.discard(cid)

    def terms_set(self, cid: int, terms: Terms, kubelet_weight: bool) -> None:
        """`kubelet_weight`: its weight is its container's, split among its programs as they
        come and go (budgets.py)."""
        if terms.weight != 1 or kubelet_weight:
            self.weighted.add(cid)
        else:
            self.weighted.discard(cid)

    # ----- turns ------------------------------------------------------------------------------

    def weighted_usage(self, cid: int, device: int, now: float) -> float:
        """Its lock time, and the moves charged to it for taking the device back at once
        (checks/throttle.py), over its weight."""
        policy = self.policy
        used = policy.usage.read(cid, device, now) + policy.returns.charged(cid, device, now)
        return weighted(used, policy.budget_rules.share_weight(cid, device))

    def min_slice(self, dev: Device, incoming: int) -> float:
        """How long a holder runs before it is preempted for `incoming`: longer when handing the
        device over moves memory."""
        policy = self.policy
        out = policy.room_rules.room_for(dev, [incoming], len(dev.holders))
        return minimum_slice(policy.min_slice_ms / 1000,
                             policy.room_rules.link(dev.index).switch_seconds(out, out))

    def turn(self, dev: Device, cid: int, first: int | None, now: float) -> float:
        """A holder's quantum beside the waiters that may be granted (`first` the first of
        them): TQ scaled by its weight against the heaviest of them, and never under the
        minimum slice for the first. Only clients of other weights than 1 are looked up, so a
        long queue of default weights is not walked."""
        policy = self.policy
        if first is None:
            return float(policy.tq)
        heavier = [policy.budget_rules.share_weight(other, dev.index) for other in self.weighted
                   if other in dev.waiters and policy._eligible_at(other, dev.index) <= now]
        heaviest = max([policy.budget_rules.share_weight(first, dev.index), *heavier])
        weight = policy.budget_rules.share_weight(cid, dev.index)
        if weight >= heaviest:  # a whole TQ: no floor to work out
            return float(policy.tq)
        return turn_length(policy.tq, weight, heaviest, self.min_slice(dev, first))

    def shorten_turn(self, dev: Device, cid: int, hold: Hold, first: int, now: float) -> None:
        turn = self.turn(dev, cid, first, now)
        if turn < hold.turn_s:
            hold.quantum_end -= hold.turn_s - turn
            hold.turn_s = turn

    # ----- claims -----------------------------------------------------------------------------

    def claim(self, dev: Device, cid: int, now: float) -> tuple[bool, list]:
        """A waiter that has had clearly less than its share when it asks goes ahead of the
        waiters clearly busier than it, while each it passes has waited under a TQ and, if that
        one gave its last turn back by itself, has not been passed before in this wait; at the
        front, it has the holders clearly busier than it drop after a minimum slice.

        Passed once at most, a program that lets go by itself (a notebook whose one long first
        cell made it the busiest for a while) waits for one more turn at most: others passing it
        one after another made it wait 6 s for a 0.1 s cell. A program whose turns are cut short
        (a trainer, dropped at the end of each) wants all the GPU it can get and may be passed
        by every program under its share during its first TQ of waiting: held to one pass, the
        second of a class of notebooks queued behind a trainer waited out its quantum.

        Returns whether it went ahead of anyone, and the drops that follow."""
        policy = self.policy
        # A gang is granted as a whole, in its members' order; a throttled client waits its turn.
        if cid in policy.gangs.of_client or policy.throttle_rules.throttled(cid, dev.index):
            return False, []
        mine = self.weighted_usage(cid, dev.index, now)
        passed = []  # from the back of the queue: usually none, so the queue is not walked
        oldest = now  # the longest-waiting of them: after earlier passes, not always the first
        for other in reversed(dev.waiters):
            if other != cid:
                # Unchanged while it waits: its last hold there ended before it asked.
                let_go = policy.clients[other].let_go.get(dev.index, False)
                if (dev.waiters[other].passed and let_go) or \
                        not clearly_under(mine, self.weighted_usage(other, dev.index, now)):
                    break
                passed.append(other)
                oldest = min(oldest, dev.waiters[other].since)
        ahead = bool(passed) and now - oldest < policy.tq
        if ahead:
            dev.waiters.go_ahead(cid, passed)
            for other in passed:
                dev.waiters[other].passed = True
        if next(iter(dev.waiters)) != cid:
            return ahead, []
        pressed = self.press_claim(dev, cid, now)
        return ahead, pressed + policy._settle(dev, now) if pressed else []

    def press_claim(self, dev: Device, cid: int, now: float) -> list:
        """Waiter `cid`, at the front, has the holders clearly busier than it drop once they have
        run a minimum slice. Weighed again at every settling, not only when it asks: a waiter
        that reaches the front behind one that passed a busy program keeps its claim when that
        program is granted next (else it waits out that program's whole quantum)."""
        policy = self.policy
        # A gang is granted as a whole, in its members' order; a throttled client waits its turn.
        if cid in policy.gangs.of_client or policy.throttle_rules.throttled(cid, dev.index):
            return []
        mine = self.weighted_usage(cid, dev.index, now)
        busier = [(holder, hold) for holder, hold in dev.holders.items()
                  if hold.dropped_at is None and
                  clearly_under(mine, self.weighted_usage(holder, dev.index, now))]
        if not busier:
            return []
        slice_s = self.min_slice(dev, cid)  # what the switch moves: looked up only when needed
        preempted = []
        for holder, hold in busier:
            if hold.granted_at + slice_s < hold.preempt_at:
                hold.preempt_at = hold.granted_at + slice_s
                preempted.append(str(policy.clients[holder]))
        if not preempted:
            return []
        dev.waiters[cid].placed_by = CLAIMED
        return [Log(f"share {policy.clients[cid]}: device {dev.index}, usage {mine:.2f} s "
                    f"weighted, under its share: {', '.join(preempted)} drop after "
                    f"{slice_s * 1000:.0f} ms held")]


class LimitStage(Stage):
    name = LIMITS

    def __init__(self, policy):
        super().__init__(policy)
        self.limited: set[int] = set()  # clients with a gpu_limit

    def eligible_at(self, device: int, cid: int) -> float | None:
        """A client with a gpu_limit pauses until its usage has fallen enough (-inf: it need
        not); None for one without."""
        limit = self.policy.clients[cid].terms.gpu_limit
        if limit is None:
            return None
        meter = self.policy.usage.meter(cid, device)
        at = meter.falls_to(limit_levels(limit)[1], meter.at)
        return -math.inf if at == meter.at else at

    def holds_back(self, dev: Device, cid: int, now: float) -> Decision | None:
        if cid in self.limited and self.policy._eligible_at(cid, dev.index) > now:
            return Decision(self.name, WAITS, "paused by its gpu limit")
        return None

    def end_turn(self, dev: Device, cid: int, hold: Hold, first: int | None, now: float):
        if now >= self.reached_at(cid, dev.index):
            limit = self.policy.clients[cid].terms.gpu_limit
            return Decision(self.name, DROPPED, "gpu limit reached", GPU_LIMIT,
                            f"gpu limit {limit:g} reached")
        return None

    def forget_client(self, cid: int) -> None:
        self.limited.discard(cid)

    def terms_set(self, cid: int, terms: Terms) -> None:
        if terms.gpu_limit is not None:
            self.limited.add(cid)
        else:
            self.limited.discard(cid)

    def reached_at(self, cid: int, device: int) -> float:
        """When a holder's usage reaches its gpu_limit (inf: never)."""
        limit = self.policy.clients[cid].terms.gpu_limit
        if limit is None:
            return math.inf
        meter = self.policy.usage.meter(cid, device)
        return meter.reaches(limit_levels(limit)[0], meter.at)

    def waiters(self, dev: Device) -> list[int]:
        """The device's waiters that have a gpu_limit, found without walking the queue."""
        return [cid for cid in self.limited if cid in dev.waiters]
