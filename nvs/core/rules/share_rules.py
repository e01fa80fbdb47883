"""The rules of shares, as part of the policy core: how long a holder's turn lasts beside the
waiters (weights, the minimum slice), who may be granted when (gpu_limit), and a waiter under
its share going ahead and cutting the holder's turn short.

A mixin of policy.Policy, as gang_rules.py is: these methods read the policy's clients, devices
and usage, and call its settling and its room rules. The pure arithmetic is in shares.py.
"""

from __future__ import annotations

import math

from ..model.actions import Log
from ..model.state import Device, Hold
from .shares import clearly_under, limit_levels, minimum_slice, turn_length, weighted


class ShareRules:
    def _weighted_usage(self, cid: int, device: int, now: float) -> float:
        """Its lock time, and the moves charged to it for taking the device back at once
        (checks/throttle.py), over its weight."""
        used = self.usage.read(cid, device, now) + self.returns.charged(cid, device, now)
        return weighted(used, self._share_weight(cid, device))

    def _eligible_at(self, cid: int, device: int) -> float:
        """When a waiter may be granted: at once (-inf) unless its gpu_limit pauses it until its
        usage has fallen enough, or a member of a gang that is still forming until the gang is
        complete or gives up."""
        forming = self.gangs.forming(cid)
        if forming is not None:
            return forming.formed_from + self.gangs.timeout_s
        limit = self.clients[cid].terms.gpu_limit
        if limit is None:
            return -math.inf
        meter = self.usage.meter(cid, device)
        at = meter.falls_to(limit_levels(limit)[1], meter.at)
        return -math.inf if at == meter.at else at

    def _limit_reached_at(self, cid: int, device: int) -> float:
        """When a holder's usage reaches its gpu_limit (inf: never)."""
        limit = self.clients[cid].terms.gpu_limit
        if limit is None:
            return math.inf
        meter = self.usage.meter(cid, device)
        return meter.reaches(limit_levels(limit)[0], meter.at)

    def _min_slice(self, dev: Device, incoming: int) -> float:
        """How long a holder runs before it is preempted for `incoming`: longer when handing the
        device over moves memory."""
        out = self._room_for(dev, [incoming], len(dev.holders))
        return minimum_slice(self.min_slice_ms / 1000, self._link(dev.index).switch_seconds(out, out))

    def _limited_waiters(self, dev: Device) -> list[int]:
        """The device's waiters that have a gpu_limit, found without walking the queue."""
        return [cid for cid in self.limited if cid in dev.waiters]

    def _paused_waiters(self, dev: Device) -> list[int]:
        """The device's waiters that may not be granted before some time: those with a gpu_limit
        and the members of forming gangs, found without walking the queue."""
        forming = [cid for cid in self.gangs.of_client
                   if cid in dev.waiters and self.gangs.forming(cid) is not None]
        return self._limited_waiters(dev) + forming

    def _first_contender(self, dev: Device, now: float) -> int | None:
        """The first waiter that may be granted now, if any."""
        return next((cid for cid in dev.waiters if self._eligible_at(cid, dev.index) <= now),
                    None)

    def _turn(self, dev: Device, cid: int, first: int | None, now: float) -> float:
        """A holder's quantum beside the waiters that may be granted (`first` the first of
        them): TQ scaled by its weight against the heaviest of them, and never under the
        minimum slice for the first. Only clients of other weights than 1 are looked up, so a
        long queue of default weights is not walked."""
        if first is None:
            return float(self.tq)
        heavier = [self._share_weight(other, dev.index) for other in self.weighted
                   if other in dev.waiters and self._eligible_at(other, dev.index) <= now]
        heaviest = max([self._share_weight(first, dev.index), *heavier])
        weight = self._share_weight(cid, dev.index)
        if weight >= heaviest:  # a whole TQ: no floor to work out
            return float(self.tq)
        return turn_length(self.tq, weight, heaviest, self._min_slice(dev, first))

    def _shorten_turn(self, dev: Device, cid: int, hold: Hold, first: int, now: float) -> None:
        turn = self._turn(dev, cid, first, now)
        if turn < hold.turn_s:
            hold.quantum_end -= hold.turn_s - turn
            hold.turn_s = turn

    def _claim_share(self, dev: Device, cid: int, now: float) -> list:
        """A waiter that has had clearly less than its share when it asks goes ahead of the
        waiters clearly busier than it, while each it passes has waited under a TQ and, if that
        one gave its last turn back by itself, has not been passed before in this wait; at the
        front, it has the holders clearly busier than it drop after a minimum slice.

        Passed once at most, a program that lets go by itself (a notebook whose one long first
        cell made it the busiest for a while) waits for one more turn at most: others passing it
        one after another made it wait 6 s for a 0.1 s cell. A program whose turns are cut short
        (a trainer, dropped at the end of each) wants all the GPU it can get and may be passed
        by every program under its share during its first TQ of waiting: held to one pass, the
        second of a class of notebooks queued behind a trainer waited out its quantum."""
        if cid in self.gangs.of_client or self._throttled(cid, dev.index):  # gangs: as a whole
            return []
        mine = self._weighted_usage(cid, dev.index, now)
        passed = []  # from the back of the queue: usually none, so the queue is not walked
        oldest = now  # the longest-waiting of them: after earlier passes, not always the first
        for other in reversed(dev.waiters):
            if other != cid:
                # Unchanged while it waits: its last hold there ended before it asked.
                let_go = self.clients[other].let_go.get(dev.index, False)
                if (dev.waiters[other].passed and let_go) or \
                        not clearly_under(mine, self._weighted_usage(other, dev.index, now)):
                    break
                passed.append(other)
                oldest = min(oldest, dev.waiters[other].since)
        if passed and now - oldest < self.tq:
            first = passed[-1]
            order = [other for other in dev.waiters if other != cid]
            place = order.index(first)
            dev.waiters = {other: dev.waiters[other]
                           for other in order[:place] + [cid] + order[place:]}
            for other in passed:
                dev.waiters[other].passed = True
        if next(iter(dev.waiters)) != cid:
            return []
        pressed = self._press_claim(dev, cid, now)
        return pressed + self._settle(dev, now) if pressed else []

    def _press_claim(self, dev: Device, cid: int, now: float) -> list:
        """Waiter `cid`, at the front, has the holders clearly busier than it drop once they have
        run a minimum slice. Weighed again at every settling, not only when it asks: a waiter
        that reaches the front behind one that passed a busy program keeps its claim when that
        program is granted next (else it waits out that program's whole quantum)."""
        if cid in self.gangs.of_client or self._throttled(cid, dev.index):  # gangs: as a whole
            return []
        mine = self._weighted_usage(cid, dev.index, now)
        busier = [(holder, hold) for holder, hold in dev.holders.items()
                  if hold.dropped_at is None and
                  clearly_under(mine, self._weighted_usage(holder, dev.index, now))]
        if not busier:
            return []
        slice_s = self._min_slice(dev, cid)  # what the switch moves: looked up only when needed
        preempted = []
        for holder, hold in busier:
            if hold.granted_at + slice_s < hold.preempt_at:
                hold.preempt_at = hold.granted_at + slice_s
                preempted.append(str(self.clients[holder]))
        if not preempted:
            return []
        return [Log(f"share {self.clients[cid]}: device {dev.index}, usage {mine:.2f} s "
                    f"weighted, under its share: {', '.join(preempted)} drop after "
                    f"{slice_s * 1000:.0f} ms held")]
