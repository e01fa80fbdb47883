"""The rules of moving memory, as part of the policy core: what must leave a device for a grant
or a drop, whom to ask, what a handoff would cost, and the idle hints that follow from it.

The stage `room` of the decision pipeline (pipeline.py): a grant waits for the room its memory
needs, one move on the host link at a time. It reads the policy's devices, residency, capacity
and move rates; the pure arithmetic is in cost.py and residency.py.
"""

from __future__ import annotations

from ... import protocol as p
from ..model.actions import Log, Send
from ..model.decision import WAITS, Decision
from ..model.stage import Stage
from ..model.state import Client, Device
from ..model.text import mib
from .cost import Link, idle_release_ms, room_to_make
from .memory.residency import PAGE, eviction_plan

# A prepared client hears a new figure once its part of the overflow grew by this much (or by an
# eighth), or fell to half: every allocation changes it a little, and each hint costs the
# program a look at its staging memory.
PREPARE_STEP = 256 << 20


class RoomStage(Stage):
    name = "room"

    def holds_back(self, dev: Device, cid: int, now: float) -> Decision | None:
        """Room holds back the waiter next in line; those behind it wait for their turn."""
        if self.policy._first_contender(dev, now) != cid:
            return None
        if dev.making_room:
            return Decision(self.name, WAITS, "for room on the device")
        if self.fetching_now(dev, now) and self.policy.residency.moved_off(dev.index, cid) > 0:
            return Decision(self.name, WAITS, "for a holder's memory to come back first")
        return None

    def link(self, device: int) -> Link:
        return self.policy.links.get(device) or Link(prior_bps=self.policy.link_priors.get(device))

    def to_fetch(self, device: int, cid: int) -> int:
        """Bytes a client must bring back to the device before it runs: not what it leaves on
        the host as it runs (libnvs's cold memory, a server's cleared cache), which a room
        asked for would have moved another's memory out for nothing (on an H200, the first
        switch asked a server for 27,304 MiB for one that brought back 4,414)."""
        residency = self.policy.residency
        off = self.policy.memory_of(cid, device) - residency.of(device, cid)
        return max(off - residency.left_on_host(device, cid), 0)

    def room_for(self, dev: Device, incoming: list[int], holders_after: int) -> int:
        """Bytes that must leave the device so that `incoming` clients' memory comes back beside
        everything there now, with a context reserve for each of `holders_after` holders."""
        fetch = sum(self.to_fetch(dev.index, cid) for cid in incoming)
        policy = self.policy
        return room_to_make(policy.capacity.of(dev.index)[0], policy.residency.total(dev.index),
                            fetch, holders_after, policy.reserve)

    def with_room(self, dev: Device, chosen: list[int], now: float, actions: list) -> list[int]:
        """The waiters chosen for a grant, once there is room for all of their memory; none while
        clients asked to move memory out have not answered. Room is asked for once per waiter,
        of clients that do not hold the device: a grant never waits twice for it."""
        if dev.making_room or not chosen:
            return [] if dev.making_room else chosen
        needed = self.room_for(dev, chosen, len(dev.holders) + len(chosen))
        if needed == 0 or all(dev.waiters[cid].room_asked for cid in chosen):
            return chosen
        for cid in chosen:
            dev.waiters[cid].room_asked = True
        plan = self.eviction_plan(dev, needed, set(chosen), now)
        actions += self._evict(dev, plan, self.policy.clients[chosen[0]], now)
        return [] if dev.making_room else chosen

    def fetching_now(self, dev: Device, now: float) -> bool:
        """Whether a holder's memory is coming back now (until its MOVED, or its deadline)."""
        return any(until > now for until in dev.fetching.values())

    def one_fetch_at_a_time(self, dev: Device, ready: list[int], now: float) -> list[int]:
        """Of the waiters ready for a grant, those that may be granted now: a grant whose memory
        must come back waits while another holder's memory is still coming back, so that the two
        moves do not share the host link (each would take twice as long, and both programs
        would wait for the later end); one with nothing to bring back goes at once."""
        busy = self.fetching_now(dev, now)
        granted = []
        for cid in ready:
            if self.policy.residency.moved_off(dev.index, cid) > 0:
                if busy:
                    continue
                busy = True
            granted.append(cid)
        return granted

    def room_beside_holders(self, dev: Device, grown: Client, now: float) -> list:
        """A holder's memory grew past what the device has room for beside the memory of those
        not holding it. On a full card the driver would push theirs out page by page as the
        holder fills it; ask them to move the excess out instead, at their link's speed. Under
        --capacity-mib this is also what makes the emulated card move what a real one would."""
        if dev.making_room:
            return []
        needed = self.room_for(dev, [], len(dev.holders))
        plan = self.eviction_plan(dev, needed, set(), now) if needed else []
        return self._evict(dev, plan, grown, now)

    def _evict(self, dev: Device, plan: list[tuple[int, int]], beneficiary: Client,
               now: float, why: str = "") -> list:
        """Ask clients that do not hold the device to move memory out, and wait for them, one
        after the other: moves that share the host link would each go at part of its rate (and
        teach the scheduler that part as the rate), and the grant waits for the last anyway. A
        revoked client, which did not even drain in time, is asked but not waited for: its
        bytes are taken as gone, as the driver's page faults will move them."""
        actions = []
        for victim, size in plan:
            client = self.policy.clients[victim]
            self.policy.credit.asked_out(dev.index, victim, size)
            self.asked(client, dev.index, size)
            self.policy.tallies.evicted(dev.index)
            self.policy.throttle_rules.charge_moves(beneficiary.registration.id, dev.index, size,
                                                    now)
            actions.append(Log(f"evict {client}: device {dev.index}, {mib(size)} to the host to "
                               f"make room for {beneficiary}{why}"))
            if client.revoked:
                self.policy.residency.presume_gone(dev.index, victim, size)
                actions.append(self._evict_frame(dev, victim, size))
            else:
                dev.evict_queue.append((victim, size))
        return actions + self.evict_next(dev, now)

    def evict_next(self, dev: Device, now: float) -> list:
        """Send the next queued EVICT once no other move is under way on the device: neither
        another EVICT nor a holder's memory coming back. Moves each way share the link as well
        (on an H200 a move out and one in, at once, ran at 24-26 GB/s each, where each alone
        runs at 43-52)."""
        if dev.evictions or not dev.evict_queue or self.fetching_now(dev, now):
            return []
        victim, size = dev.evict_queue.pop(0)
        move_s = self.link(dev.index).to_host.seconds(size)
        dev.evictions[victim] = (now + self.policy.grace_s + move_s, size)
        return [self._evict_frame(dev, victim, size)]

    def _evict_frame(self, dev: Device, victim: int, size: int) -> Send:
        ordinal = self.policy.clients[victim].numbering.own_ordinal(dev.index)
        return Send(victim, p.Evict(ordinal, 0, size))

    def eviction_plan(self, dev: Device, needed: int, exclude: set[int], now: float,
                      released: int | None = None,
                      idle_only: bool = False) -> list[tuple[int, int]]:
        """Who moves how much out so that `needed` bytes leave the device (residency.eviction_plan):
        clients with memory there that do not hold it, none of `exclude`, and no waiter if
        `idle_only`; `released`, a holder, counts as one that lets go now (to weigh what lending
        its gap would move, or what its drop moves)."""
        candidates = {cid: size for cid, size in self.policy.residency.on(dev.index).items()
                      if (cid not in dev.holders or cid == released) and cid not in exclude
                      and not (idle_only and cid in dev.waiters)}
        rank = {cid: self.policy.gaps.rank(cid, dev.index, now) for cid in candidates
                if cid not in dev.waiters}
        if released in rank:
            rank[released] = self.policy.gaps.rank_if_idle_from(released, dev.index, now)
        allocated = {cid: self.policy.memory_of(cid, dev.index) for cid in candidates}
        return eviction_plan(needed, candidates, list(dev.waiters), rank, allocated)

    def ready_room(self, dev: Device, now: float) -> list:
        """While the first waiter that may be granted waits for the holders, the idle clients
        (neither holding nor waiting) move out now what its grant will need of them: the grant
        then waits only for what the holders themselves must give, if anything, and the link
        moves while the holders run rather than after. Once per wait."""
        head = self.policy._first_contender(dev, now)
        if head is None or dev.making_room or dev.waiters[head].room_readied or not dev.holders:
            return []
        dev.waiters[head].room_readied = True
        staying = len(dev.holders) if self.policy.mode is p.Mode.AUTO else 0
        return self._room_from_the_idle(dev, head, staying + 1, now)

    def ready_room_ahead(self, dev: Device, now: float) -> list:
        """When a device is left with no holder and nobody waiting, room is made for the client
        expected back on it first, out of the other idle ones: its cell then finds the room
        ready and waits only for its own memory to come back. Once for each time the device is
        left so; a guess that turns out wrong has only moved out early what some grant would
        have needed moved out later."""
        if dev.holders or dev.waiters or dev.making_room or dev.readied_ahead or \
                self.policy.mode is p.Mode.OFF:
            return []
        dev.readied_ahead = True
        away = [cid for cid in self.policy.clients if self.to_fetch(dev.index, cid)]
        if not away:
            return []
        gaps = self.policy.gaps
        expected = {cid: back for cid in away
                    if (back := gaps.expected_back(cid, dev.index, now)) is not None}
        if expected:
            next_back = min(expected, key=expected.get)
            why = f", expected back in {max(expected[next_back] - now, 0.0):.3f} s"
        else:
            next_back = self._longest_away(dev.index, away)
            why = ", away the longest"
        return self._room_from_the_idle(dev, next_back, 1, now, why)

    def _longest_away(self, device: int, away: list[int]) -> int:
        """With no pattern to go by (gaps.expected_back: none seen yet, or all idle past
        theirs), the client expected back is the one whose work ended first, as when programs
        take turns: of two servers, the other one, whose whole cleared cache would otherwise
        leave the card during its first request (on an H200, 28.6 GB in 2-9 s); those that
        never held the device last, in the order they came."""
        def ended(cid: int) -> tuple:
            since = self.policy.gaps.idle_since(cid, device)
            return (since is None, since or 0.0, cid)
        return min(away, key=ended)

    def _room_from_the_idle(self, dev: Device, beneficiary: int, holders_after: int, now: float,
                            why: str = "") -> list:
        """Ask the idle clients (neither holding nor waiting) now for the room `beneficiary`
        will need beside `holders_after` holders."""
        needed = self.room_for(dev, [beneficiary], holders_after)
        plan = self.eviction_plan(dev, needed, {beneficiary}, now, idle_only=True) \
            if needed else []
        return self._evict(dev, plan, self.policy.clients[beneficiary], now, why)

    def evict_on_drop(self, dev: Device, cid: int, now: float) -> int:
        """What a holder being dropped moves out as it releases: its part of the room the head
        waiter (or, with nobody waiting, the holders that stay) needs, the room shared with the
        idle clients as any eviction is (_eviction_plan); they are asked for the rest when the
        grant comes."""
        staying = sum(1 for h, hold in dev.holders.items()
                      if hold.dropped_at is None and h != cid)
        incoming = list(dev.waiters)[:1]
        needed = self.room_for(dev, incoming, staying + len(incoming))
        if needed <= 0:
            return 0
        plan = self.eviction_plan(dev, needed, set(incoming), now, released=cid)
        return sum(size for victim, size in plan if victim == cid)

    def _room_it_may_give(self, dev: Device, cid: int) -> int:
        """What a holder may be asked to have out at once, by its drop or, once it has let go,
        by the EVICTs of later grants: its part of the overflow (_may_have_to_leave). IDLE_HINT
        announces it from the holder's grant on, so that the program gets its staging memory
        ready once, in the background, rather than at its first move (on an H200 a first move
        out of 5-9 GiB waited 0.8-2.6 s for new pinned host memory, where the move took 0.1-0.2
        s)."""
        return self.to_prepare(cid, self.policy.clients[cid], dev.index,
                               self._overflow_share(dev.index), 0)

    def asked(self, client: Client, device: int, size: int) -> None:
        """An EVICT or DROP_LOCK asked the client to move `size` bytes out."""
        if size > client.asked_most.get(device, 0):
            client.asked_most[device] = size

    def wanted(self, cid: int, client: Client, device: int, overflow_share: int,
               planned: int) -> int:
        """The staging memory the client would want for the device, the budget aside: its
        share of the overflow, what making room for all of it would ask of it first
        (`planned`: planned_asks), or the most one move out was asked of it there, whichever
        is most (the room a grant needs is not shared evenly, and a pool short of what the
        next move asks is pinned as that move waits), at most its memory there; 0 once it all
        fits."""
        if not overflow_share:
            return 0
        most = max(overflow_share, planned, -(-client.asked_most.get(device, 0) // PAGE) * PAGE)
        return min(most, self.policy.memory_of(cid, device))

    def to_prepare(self, cid: int, client: Client, device: int, overflow_share: int,
                   planned: int) -> int:
        """What the client is told to prepare: what it wants, within the staging budget."""
        return self.policy.staging.part(self.wanted(cid, client, device, overflow_share,
                                                    planned))

    def planned_asks(self, device: int, now: float) -> dict[int, int]:
        """Client -> what one grant may ask of it beyond its share of the overflow, of the
        clients that do not hold the device: a client idle past its pattern, or of none seen
        yet, may be the first the eviction plan asks (eviction_plan: the longest idle first),
        and then for all it has, up to the whole overflow; one idle in its usual pattern is
        asked an even part (its share). So a program hears, from its allocation on, what the
        first grant after it may ask (on an H200, 4 x 12 GiB under 32 GiB: the first EVICT
        asked one program for 12 GiB where it had been told its 5.6 GiB share, and the move
        waited 0.9 s for the rest of its staging memory to be pinned)."""
        dev = self.policy.devices.get(device)
        holders = dev.holders if dev is not None else {}
        over = -(-self._overflow(device) // PAGE) * PAGE
        return {cid: over for cid, client in self.policy.clients.items()
                if client.allocated.get(device) and cid not in holders
                and self.policy.gaps.rank(cid, device, now)[0] == 0}

    def staging_wanted(self, now: float) -> int:
        """What every program's staging memory would hold, each all it wants (wanted): the
        devices' that do not all fit."""
        wanted = 0
        for device in [device for device, allocated in self.policy.allocated.items() if allocated]:
            share = self._overflow_share(device)
            if share:
                planned = self.planned_asks(device, now)
                wanted += sum(self.wanted(cid, client, device, share, planned.get(cid, 0))
                              for cid, client in self.policy.clients.items()
                              if client.allocated.get(device))
        return wanted

    def staging_told(self) -> int:
        """What the programs were told to prepare, each its last word on each device."""
        return sum(sum(self.staging_of(cid, client).values())
                   for cid, client in self.policy.clients.items())

    def staging_of(self, cid: int, client: Client) -> dict[int, int]:
        """Device -> what the client was told to prepare there, idle or holding."""
        told = {device: size for device, size in client.told_to_prepare.items() if size}
        for device, dev in self.policy.devices.items():
            hold = dev.holders.get(cid)
            if hold is not None and hold.hint_evict_bytes:
                told[device] = hold.hint_evict_bytes
        return dict(sorted(told.items()))

    def settle_staging(self, now: float) -> bool:
        """The fraction of its share each program prepares, weighed again (staging_budget.py);
        True when it changed."""
        staging = self.policy.staging
        if staging.limit is None and staging.host is None:
            return False
        # Settled at every decision: where the budget holds all the memory there is (a host
        # with memory to spare), nobody's figure is worked out. It only grows with `told`.
        least = staging.budget(0)
        if least is None or least >= sum(self.policy.allocated.values()):
            return staging.settle(0, 0)
        return staging.settle(self.staging_wanted(now), self.staging_told())

    def _overflow_share(self, device: int) -> int:
        """What of a client's memory may have to be off the device at once (at most what it has
        allocated there): the overflow (what the device lacks for all of its clients' memory,
        as any grant's room is counted), shared by the clients that may give it, all but one
        that runs, in whole pages. Staging memory is pinned host memory for this much (libnvs),
        so it stays about the host memory the overflow takes anyway, not a copy of every
        program's whole memory; a move that asks for more migrates the rest."""
        if not self._oversubscribed(device):
            return 0
        sharing = sum(1 for client in self.policy.clients.values() if client.allocated.get(device))
        share = -(-self._overflow(device) // max(sharing - 1, 1))
        return -(-share // PAGE) * PAGE

    def _overflow(self, device: int) -> int:
        """What the device lacks for all of its clients' memory, counted as a grant's room is
        (its holders each keep the reserve)."""
        dev = self.policy.devices.get(device)
        holders = len(dev.holders) if dev is not None else 0
        return room_to_make(self.policy.capacity.of(device)[0], self.policy.allocated[device], 0,
                            max(holders, 1), self.policy.reserve)

    def _oversubscribed(self, device: int) -> bool:
        """Whether the memory allocated on the device does not all fit there at once. Only the
        memory of clients that may bring it there counts (checks/claim_rules.py): what a
        client that never asked for the device, and that NVML does not list there, says it
        allocated makes nobody get ready to move out (one report of 4 TiB from a client
        holding nothing once had three idle programs pin 256 MiB each)."""
        capacity = self.policy.capacity.of(device)[0]
        if capacity is None:
            return False
        dev = self.policy.devices.get(device)
        holders = len(dev.holders) if dev is not None else 0
        room = capacity - self.policy.reserve * max(holders, 1)
        if self.policy.allocated[device] <= room:  # most reports: no client is walked
            return False
        asked = sum(client.allocated.get(device, 0) for cid, client in self.policy.clients.items()
                    if self.policy.claim_rules.may_bring_memory(cid, client, dev, device))
        return asked > room

    def prepare_hints(self, device: int, now: float) -> list:
        """IDLE_HINT to each client with memory on the device that does not hold it, once its
        memory there may have to leave (_overflow_share; again when that grew, or fell far,
        and 0 once it all fits again, so that the program gives its staging memory back): when
        somebody asks for room, it then moves out at the copy's speed, not after growing its
        staging memory (on an H200, 0.6-3.8 s for 1-7 GiB while other programs grew theirs,
        against a 0.1 s move). Only its evict_bytes counts to a client that does not hold the
        device."""
        dev = self.policy.devices.get(device)
        idle = [cid for cid in self.policy.residency.on(device)
                if dev is None or cid not in dev.holders]
        idle += [cid for cid, client in self.policy.clients.items()
                 if client.told_to_prepare.get(device) and cid not in idle
                 and (dev is None or cid not in dev.holders)]
        # Most reports find nobody idle with memory there: the capacity is not even looked up.
        if not idle:
            return []
        self.settle_staging(now)
        over_budget = self.policy.staging.bounding()
        actions = []
        overflow_share = self._overflow_share(device)
        planned = self.planned_asks(device, now) if overflow_share else {}
        for cid in idle:
            client = self.policy.clients.get(cid)
            if client is None:
                continue
            told = client.told_to_prepare.get(device, 0)
            share = self.to_prepare(cid, client, device, overflow_share, planned.get(cid, 0))
            grown = share >= told + max(PREPARE_STEP, told // 8)
            # Past the host's staging budget a program gives back what it was told to give.
            shrunk = share < told // 2 or (over_budget and share < told)
            if not (share > told and (told == 0 or grown)) and not shrunk:
                continue
            client.told_to_prepare[device] = share
            ordinal = client.numbering.own_ordinal(device)
            actions.append(Send(cid, p.IdleHint(ordinal, 0, share)))
        return actions

    def switch_seconds(self, device: int) -> float:
        """What handing the device to the next client now would cost in moves: the room it
        needs, moved out now and back in when the holder returns (its own memory comes back
        whenever it runs, so that is no cost of switching early). The next client is the head
        waiter or, with nobody waiting, the last other holder that still has memory there: a
        holder that releases early with nobody waiting is evicted as soon as that one asks."""
        dev = self.policy.devices.get(device)
        if dev is None:
            return 0.0
        head = next(iter(dev.waiters), None)
        if head is None:
            last = self.policy.last_end.get(device, (None, ""))[0]
            client = self.policy.clients.get(last) if last is not None else None
            if client is None or last in dev.holders or not client.allocated.get(device):
                return 0.0
            head = last
        out = self.room_for(dev, [head], len(dev.holders))
        return self.link(device).switch_seconds(out, out)

    def idle_hints(self, dev: Device, now: float) -> list:
        """IDLE_HINT for each holder whose advice changed: how long to keep the lock through an
        idle gap, from what handing it to the head waiter would move and whether anyone waits
        (cost.idle_release_ms) or, where its gaps are worth lending, soon (gap_rules.py); and what
        it may be asked to move out (so that it can get ready for that while it works)."""
        actions = []
        self.settle_staging(now)
        contender = self.policy._first_contender(dev, now)
        usual = idle_release_ms(self.switch_seconds(dev.index), self.policy.tq,
                                contender is not None, self.policy.all_fit(dev))
        for cid, hold in dev.holders.items():
            if hold.dropped_at is not None:
                continue
            hint = self.policy.gap_rules.gap_hint(dev, cid, hold, contender, now) or usual
            evict = self._room_it_may_give(dev, cid)
            if (hint, evict) != (hold.idle_hint_ms, hold.hint_evict_bytes):
                hold.idle_hint_ms, hold.hint_evict_bytes = hint, evict
                ordinal = self.policy.clients[cid].numbering.own_ordinal(dev.index)
                actions.append(Send(cid, p.IdleHint(ordinal, hint, evict)))
        return actions + self.prepare_hints(dev.index, now)
