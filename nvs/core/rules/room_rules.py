"""The rules of moving memory, as part of the policy core: what must leave a device for a grant
or a drop, whom to ask, what a handoff would cost, and the idle hints that follow from it.

A mixin of policy.Policy, as gang_rules.py is: these methods read the policy's devices,
residency, capacity and move rates. The pure arithmetic is in cost.py and residency.py.
"""

from __future__ import annotations

from ... import protocol as p
from ..model.actions import Log, Send
from ..model.state import Client, Device
from ..model.text import mib
from .cost import Link, idle_release_ms, room_to_make
from .residency import eviction_order, take


class RoomRules:
    def _link(self, device: int) -> Link:
        return self.links.get(device) or Link(prior_bps=self.link_priors.get(device))

    def _to_fetch(self, device: int, cid: int) -> int:
        """Bytes a client must bring back to the device before it runs."""
        return max(self.memory_of(cid, device) - self.residency.of(device, cid), 0)

    def _room_for(self, dev: Device, incoming: list[int], holders_after: int) -> int:
        """Bytes that must leave the device so that `incoming` clients' memory comes back beside
        everything there now, with a context reserve for each of `holders_after` holders."""
        fetch = sum(self._to_fetch(dev.index, cid) for cid in incoming)
        return room_to_make(self.capacity.of(dev.index)[0], self.residency.total(dev.index), fetch,
                            holders_after, self.reserve)

    def _with_room(self, dev: Device, chosen: list[int], now: float, actions: list) -> list[int]:
        """The waiters chosen for a grant, once there is room for all of their memory; none while
        clients asked to move memory out have not answered. Room is asked for once per waiter,
        of clients that do not hold the device: a grant never waits twice for it."""
        if dev.evictions or not chosen:
            return [] if dev.evictions else chosen
        needed = self._room_for(dev, chosen, len(dev.holders) + len(chosen))
        if needed == 0 or all(dev.waiters[cid].room_asked for cid in chosen):
            return chosen
        for cid in chosen:
            dev.waiters[cid].room_asked = True
        plan = take(needed, self._evictable(dev, exclude=set(chosen)))
        actions += self._evict(dev, plan, self.clients[chosen[0]], now)
        return [] if dev.evictions else chosen

    def _room_beside_holders(self, dev: Device, grown: Client, now: float) -> list:
        """A holder's memory grew past what the device has room for beside the memory of those
        not holding it. On a full card the driver would push theirs out page by page as the
        holder fills it; ask them to move the excess out instead, at their link's speed. Under
        --capacity-mib this is also what makes the emulated card move what a real one would."""
        if dev.evictions:
            return []
        needed = self._room_for(dev, [], len(dev.holders))
        plan = take(needed, self._evictable(dev, exclude=set())) if needed else []
        return self._evict(dev, plan, grown, now)

    def _evict(self, dev: Device, plan: list[tuple[int, int]], beneficiary: Client,
               now: float) -> list:
        """Ask clients that do not hold the device to move memory out, and wait for them; a
        revoked client, which did not even drain in time, is asked but not waited for: its bytes
        are taken as gone, as the driver's page faults will move them."""
        actions = []
        link = self._link(dev.index)
        for victim, size in plan:
            client = self.clients[victim]
            if client.revoked:
                self.residency.presume_gone(dev.index, victim, size)
            else:
                dev.evictions[victim] = (now + self.grace_s + link.to_host.seconds(size), size)
            self.credit.asked_out(dev.index, victim, size)
            self.tallies.evicted(dev.index)
            actions += [Send(victim, p.Evict(client.numbering.own_ordinal(dev.index), 0, size)),
                        Log(f"evict {client}: device {dev.index}, {mib(size)} to the host to "
                            f"make room for {beneficiary}")]
        return actions

    def _evictable(self, dev: Device, exclude: set[int]) -> list[tuple[int, int]]:
        """Clients with memory on the device that may be asked to move it out now (no holder,
        none of `exclude`), in the order they are asked."""
        candidates = {cid: size for cid, size in self.residency.on(dev.index).items()
                      if cid not in dev.holders and cid not in exclude}
        return eviction_order(candidates, list(dev.waiters))

    def _evict_on_drop(self, dev: Device, cid: int) -> int:
        """What a holder being dropped moves out as it releases: the room the head waiter (or, with
        nobody waiting, the holders that stay) needs, as far as its own memory there goes."""
        staying = sum(1 for h, hold in dev.holders.items()
                      if hold.dropped_at is None and h != cid)
        incoming = list(dev.waiters)[:1]
        needed = self._room_for(dev, incoming, staying + len(incoming))
        return min(needed, self.residency.of(dev.index, cid))

    def switch_seconds(self, device: int) -> float:
        """What handing the device to the next client now would cost in moves: the room it
        needs, moved out now and back in when the holder returns (its own memory comes back
        whenever it runs, so that is no cost of switching early). The next client is the head
        waiter or, with nobody waiting, the last other holder that still has memory there: a
        holder that releases early with nobody waiting is evicted as soon as that one asks."""
        dev = self.devices.get(device)
        if dev is None:
            return 0.0
        head = next(iter(dev.waiters), None)
        if head is None:
            last = self.last_end.get(device, (None, ""))[0]
            client = self.clients.get(last) if last is not None else None
            if client is None or last in dev.holders or not client.allocated.get(device):
                return 0.0
            head = last
        out = self._room_for(dev, [head], len(dev.holders))
        return self._link(device).switch_seconds(out, out)

    def _idle_hints(self, dev: Device, now: float) -> list:
        """IDLE_HINT for each holder whose advice changed: how long to keep the lock through an
        idle gap, from what handing it to the head waiter would move and whether anyone waits
        (cost.idle_release_ms) or, where its gaps are worth lending, soon (gap_rules.py); and what
        its drop would ask it to move out (so that it can get ready for that while it works)."""
        actions = []
        contender = self._first_contender(dev, now)
        usual = idle_release_ms(self.switch_seconds(dev.index), self.tq, contender is not None)
        for cid, hold in dev.holders.items():
            if hold.dropped_at is not None:
                continue
            hint = self._gap_hint(dev, cid, hold, contender, now) or usual
            evict = self._evict_on_drop(dev, cid) if dev.waiters else 0
            if (hint, evict) != (hold.idle_hint_ms, hold.hint_evict_bytes):
                hold.idle_hint_ms, hold.hint_evict_bytes = hint, evict
                ordinal = self.clients[cid].numbering.own_ordinal(dev.index)
                actions.append(Send(cid, p.IdleHint(ordinal, hint, evict)))
        return actions
