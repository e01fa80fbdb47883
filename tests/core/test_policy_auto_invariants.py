"""Property tests of mode `auto`: random memory reports, requests, releases, disconnects, TQ and
mode changes on a fake clock, checked against the rules of policy.py's docstring.

A model keeps each device's FCFS queue (with request times), its holders in grant order (with
grant and drop times), each client's reported memory and the device capacities. Every message
the core sends is checked as it goes out, and the state after every step:

- memory: the holders not asked to drop fit (their bytes plus one reserve each within the
  capacity) or are a single client; every grant leaves all holders, dropping ones included,
  fitting; with mode `on` or no known capacity that means one holder;
- drops: only for a quantum that is over while someone waits, for a minimum slice that is over
  (a waiter at the head was clearly under the holder's usage when it asked), or for holders
  that no longer fit, and then never the oldest holder not asked to drop, and only holders that
  do not fit beside the older ones that stay;
- the queue is first come first served but for the share rule (share_model.py): a waiter that
  asks clearly under the usage of the waiters at the back goes ahead of them, if each of them
  has waited less than a TQ; and for idle gaps lent (loan_model.py): a lender back from its gap
  goes first and has those holding on its loan drop (unless it fits beside them), and gets the
  rest of its turn; who gave the device back to it goes first again when it asks;
- bounded overtaking: a grant passes only waiters that do not fit and have waited less than one
  TQ, or that have memory to bring back while a client granted before them brings its own back
  (one move on the host link at a time: they go once it is back); no waiter the rule would
  admit is left waiting; a waiter at the head that has waited a TQ is granted within TQ + grace
  (counted from when the test first sees it so, and again after a TQ change);
- GRANT_AFTER_WAIT exactly when the grant did not answer the request at once, GRANT_SHARED
  exactly when the device then has more than one holder;
- nothing to disconnected clients; revocation exactly `grace` after the drop, plus the time the
  drop's move out may take at the assumed rate; the core's timer is the model's.

This is the policy as the scheduler runs it. The clients here answer every EVICT at once (MOVED,
done), and say their memory is back as soon as they are granted: making room, and bringing
memory back one client at a time, then delay a grant only within one step, and the rules above
hold as they are. How long a minimum slice lasts follows from what the switch would move, by
the core's estimate of where memory is, which this model does not keep: that move's time is
taken from the core (`switch_seconds`) as the claim is made, and the slice worked out from it
(shares.py); so is whose memory was moved off.
"""

from __future__ import annotations

import math

from clock_machine import ClockMachine
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule
from loan_model import LoanModel
from share_model import ShareModel

from gemshare_nvs import protocol as p
from gemshare_nvs.config.settings import DEFAULT_MIN_SLICE_MS
from gemshare_nvs.core.model.actions import Send
from gemshare_nvs.core.policy import Policy
from gemshare_nvs.core.rules.cost import DEFAULT_TO_HOST_BPS
from gemshare_nvs.core.rules.shares import minimum_slice

G = 1 << 30
RESERVE = 1 * G
GRACE = 1.5  # long beside the quanta, so that heads often wait a full one
NVML = {1: 12 * G}  # device 1's capacity comes from NVML; device 0's from the clients
DEVICES = (0, 1)
CLIENT_IDS = st.integers(1, 10)
SIZES = st.sampled_from([0, 1, 2, 3, 5, 8, 13]).map(lambda gib: gib * G)
TOTALS = st.sampled_from([0, 8, 16]).map(lambda gib: gib * G)


class Hold:
    def __init__(self, granted_at: float):
        self.granted_at = granted_at
        self.dropped_at: float | None = None
        self.revoke_at: float | None = None
        self.preempt_at = math.inf  # the end of its minimum slice, once a waiter claimed it
        self.turn: float | None = None  # its quantum when not TQ (a lender back from its gap)
        self.lender: int | None = None  # granted in that client's idle gap


class AutoMachine(ClockMachine):
    LIMIT: int | None = None  # the operator's --capacity-mib, in bytes

    def __init__(self):
        super().__init__()
        self.policy = Policy(tq=3, mode=p.Mode.AUTO, grace_s=GRACE, max_clients=16,
                             reserve_bytes=RESERVE, nvml_capacity=NVML,
                             capacity_limit=self.LIMIT)
        self.now = 0.0
        self.connected: set[int] = set()
        self.gone: set[int] = set()
        self.memory: dict[tuple[int, int], int] = {}  # (client, device) -> bytes
        self.totals: dict[tuple[int, int], int] = {}  # (client, device) -> reported total
        # [client, since, fresh, passed (a waiter under its share went ahead of it)]
        self.queues: dict[int, list[list]] = {d: [] for d in DEVICES}
        self.holders: dict[int, dict[int, Hold]] = {d: {} for d in DEVICES}  # grant order
        self.stuck: dict[int, tuple[int, float]] = {}  # device -> (head, first seen stuck)
        self.displaced: list[tuple[int, int]] = []  # (device, client) dropped for memory, per step
        self.shares = ShareModel(lambda cid, device, now:
                                 self.policy.returns.charged(cid, device, now))
        self.loans = LoanModel()
        self.gap_drops: set[tuple[int, int]] = set()  # (device, client) a lender back drops
        self.bringing_back: set[int] = set()  # granted, and not yet said their memory is back

    # ----- the rules as the model sees them -------------------------------------------------

    @property
    def tq(self) -> int:
        return self.policy.tq

    def capacity(self, device: int) -> int | None:
        if device in NVML:
            found = NVML[device]
        else:
            found = max((self.totals.get((c, device), 0) for c in self.connected),
                        default=0) or None
        if self.LIMIT is None:
            return found
        return self.LIMIT if found is None else min(found, self.LIMIT)

    def size(self, cid: int, device: int) -> int:
        return self.memory.get((cid, device), 0)

    def fits(self, device: int, members) -> bool:
        members = list(members)
        if len(members) <= 1:
            return True
        capacity = self.capacity(device) if self.policy.mode is p.Mode.AUTO else None
        return capacity is not None and \
            sum(self.size(c, device) for c in members) + RESERVE * len(members) <= capacity

    def active(self, device: int) -> list[int]:
        return [c for c, h in self.holders[device].items() if h.dropped_at is None]

    def turn_end(self, hold: Hold) -> float:
        """When a holder is dropped if someone waits: its quantum's end, or its slice's."""
        return min(hold.granted_at + (self.tq if hold.turn is None else hold.turn),
                   hold.preempt_at)

    def end_hold(self, device: int, cid: int, by_itself: bool = True) -> bool:
        """Whether `cid` held the device (it no longer does); `by_itself` unless the scheduler
        ended the hold without a drop (mode off)."""
        hold = self.holders[device].pop(cid, None)
        if hold is None:
            return False
        self.shares.ended(cid, device, self.now, let_go=by_itself and hold.dropped_at is None)
        return True

    def claim(self, device: int, cid: int) -> None:
        """The share rule, for `cid`, which has just asked and waits at the back of the queue."""
        queue = self.queues[device]
        entries = {entry[0]: entry for entry in queue}
        order = self.shares.claimed(device, list(entries),
                                    {c: entry[1] for c, entry in entries.items()}, self.now,
                                    self.tq, {c for c, entry in entries.items() if entry[3]})
        for passed in order[order.index(cid) + 1:]:
            entries[passed][3] = True
        queue[:] = [entries[c] for c in order]
        if order[0] == cid:
            self.press(device)

    def press(self, device: int) -> None:
        """The waiter at the head has the holders clearly busier than it drop after a minimum
        slice: when it asks, and again whenever a holder is granted."""
        queue = self.queues[device]
        if not queue:
            return
        preempted = self.shares.preempted(device, queue[0][0], self.active(device), self.now)
        if preempted:
            slice_s = minimum_slice(DEFAULT_MIN_SLICE_MS / 1000,
                                    self.policy.switch_seconds(device))
            for holder in preempted:
                hold = self.holders[device][holder]
                hold.preempt_at = min(hold.preempt_at, hold.granted_at + slice_s)

    # ----- checking what the core sends -----------------------------------------------------

    def apply(self, actions: list) -> None:
        granted, evicts = [], []
        self.displaced = []
        # Who held without a drop before these actions: a holder dropped for memory is let go
        # beside the older of these that stay, though one of them may end its quantum as well.
        active = {device: self.active(device) for device in DEVICES}
        # The first waiter weighs its claim once a settling's grants are made, before the drops
        # and the rest that the same settling sends.
        pressing: set[int] = set()
        for action in actions:
            if not isinstance(action, Send):
                continue
            cid, message = action.client, action.message
            assert cid in self.connected and cid not in self.gone, \
                f"{message} sent to client {cid}, which is not connected"
            if isinstance(message, p.LockGranted):
                self.check_grant(cid, message)
                granted.append((cid, message))
                pressing.add(message.device)
                continue
            for device in sorted(pressing):
                self.press(device)
            pressing.clear()
            if isinstance(message, p.DropLock):
                self.check_drop(cid, message)
            elif isinstance(message, p.Evict):
                evicts.append((cid, message))
            elif isinstance(message, p.LockRevoked):
                self.check_revoke(cid, message.device)
        for device, cid in self.displaced:  # dropped for memory; it holds until it answers
            order = list(self.holders[device])
            older = [c for c in order[:order.index(cid)]
                     if c in active[device] and (device, c) not in self.displaced]
            assert not self.fits(device, older + [cid]), \
                f"client {cid} was dropped but fits beside the older holders {older}"
        for device in sorted(pressing):
            self.press(device)
        for cid, message in granted:
            shared = len(self.holders[message.device]) > 1
            assert bool(message.flags & p.GRANT_SHARED) == shared, (cid, message)
        for queue in self.queues.values():
            for entry in queue:
                entry[2] = False  # a later grant comes after a wait
        for cid, message in evicts:
            self.apply(self.policy.moved(cid, message.device, p.MOVED_TO_HOST | p.MOVED_DONE,
                                         message.bytes, 0, self.now))
        for cid, message in granted:
            self.bringing_back.discard(cid)
            if cid in self.holders[message.device]:
                self.apply(self.policy.moved(cid, message.device, p.MOVED_DONE,
                                             self.size(cid, message.device), 0, self.now))
        for device in DEVICES:
            if not self.holders[device] and not self.queues[device] and \
                    self.loans.active(device, self.now) is None:
                self.loans.device_gone(device)

    def check_grant(self, cid: int, message: p.LockGranted) -> None:
        device = message.device
        assert self.policy.mode is not p.Mode.OFF
        queue = self.queues[device]
        position = next((i for i, entry in enumerate(queue) if entry[0] == cid), None)
        assert position is not None, f"grant to {cid}, which is not waiting"
        holding = list(self.holders[device])
        for ahead, since, *_ in queue[:position]:
            if self.waits_for_the_link(device, ahead):
                continue
            assert not self.fits(device, holding + [ahead]), \
                f"grant to {cid} before {ahead}, which fits and asked first"
            assert self.now - since < self.tq, \
                f"grant to {cid} passes {ahead}, which has waited a quantum"
        assert self.fits(device, holding + [cid]), f"grant to {cid} overcommits device {device}"
        _, _, fresh, _ = queue.pop(position)
        assert bool(message.flags & p.GRANT_AFTER_WAIT) == (not fresh)
        hold = self.holders[device][cid] = Hold(self.now)
        hold.turn, hold.lender = self.loans.granted(device, cid, self.now,
                                                    DEFAULT_MIN_SLICE_MS / 1000, self.tq)
        assert message.quantum_ms == round((self.tq if hold.turn is None else hold.turn) * 1000)
        self.shares.granted(cid, device, self.now)
        self.bringing_back.add(cid)

    def waits_for_the_link(self, device: int, cid: int) -> bool:
        """Whether the waiter has memory to bring back while a client granted before it brings
        its own back: it waits for that move to end (one move on the link at a time), and others
        with nothing to bring back may go first. What each client moved off is the core's to
        know (residency), which this model does not keep."""
        dev = self.policy.devices.get(device)
        return dev is not None and self.policy.residency.moved_off(device, cid) > 0 and \
            any(c in self.bringing_back and until > self.now for c, until in dev.fetching.items())

    def check_drop(self, cid: int, message: p.DropLock) -> None:
        device = message.device
        hold = self.holders[device].get(cid)
        assert hold is not None and hold.dropped_at is None, "drop to a client not holding"
        turn_over = bool(self.queues[device]) and self.now >= self.turn_end(hold)
        if (device, cid) in self.gap_drops:  # the lender of its loan is back
            self.gap_drops.discard((device, cid))
        elif not turn_over:
            active = self.active(device)
            assert not self.fits(device, active), "needless drop: the holders fit"
            assert cid != active[0], "the oldest holder was dropped for memory"
            self.displaced.append((device, cid))
        hold.dropped_at = self.now
        hold.revoke_at = self.now + GRACE + (message.evict_bytes / DEFAULT_TO_HOST_BPS
                                             if message.evict_bytes else 0.0)

    def check_revoke(self, cid: int, device: int) -> None:
        hold = self.holders[device].get(cid)
        assert hold is not None and hold.dropped_at is not None
        assert self.now == hold.revoke_at, "revocation not exactly at grace (and move time)"
        self.end_hold(device, cid)

    def model_deadline(self) -> float | None:
        due = []
        for device in DEVICES:
            for hold in self.holders[device].values():
                if hold.dropped_at is not None:
                    due.append(hold.revoke_at)
                elif self.queues[device]:
                    due.append(self.turn_end(hold))
        return min(due, default=None)

    # ----- events ---------------------------------------------------------------------------

    @initialize(sizes=st.lists(SIZES, min_size=3, max_size=3))
    def some_clients(self, sizes):
        for cid, size in zip((1, 2, 3), sizes):  # known capacity and contention from the start
            self.register(cid)
            self.report(cid, 0, size, 16 * G)
            self.report(cid, 1, size, 0)

    @rule(cid=CLIENT_IDS)
    def register(self, cid):
        if cid in self.connected or cid in self.gone:
            return
        self.connected.add(cid)
        self.apply(self.policy.register(cid, 1000 + cid, 1000, 1000, p.Register(0, 0, "x"),
                                        self.now, 0.0))

    @precondition(lambda self: self.connected)
    @rule(data=st.data(), device=st.sampled_from(DEVICES), size=SIZES, total=TOTALS)
    def mem_report(self, data, device, size, total):
        self.report(data.draw(st.sampled_from(sorted(self.connected))), device, size, total)

    def report(self, cid: int, device: int, size: int, total: int) -> None:
        self.memory[(cid, device)] = size
        if total:
            self.totals[(cid, device)] = total
        self.apply(self.policy.mem_report(cid, device, size, total, self.now))

    @precondition(lambda self: self.connected)
    @rule(data=st.data(), device=st.sampled_from(DEVICES))
    def request(self, data, device):
        queue = self.queues[device]
        idle = self.connected - set(self.holders[device]) - {entry[0] for entry in queue}
        self.ask(device, data.draw(st.sampled_from(sorted(idle or self.connected))))

    def ask(self, device: int, cid: int) -> None:
        """`cid` asks for the device (again, now and then)."""
        queue = self.queues[device]
        new = self.policy.mode is not p.Mode.OFF and cid not in self.holders[device] \
            and all(entry[0] != cid for entry in queue)
        if new:
            queue.append([cid, self.now, True, False])
            self.shares.asked(cid, device, self.now)
        actions = self.policy.request_lock(cid, device, self.now)
        placed = False
        if new:
            holders = self.holders[device]
            borrowers = [c for c, h in holders.items() if h.lender == cid and h.dropped_at is None]
            placed, drops = self.loans.asked(device, cid, self.now, queue, borrowers,
                                             self.fits(device, self.active(device) + [cid]))
            self.gap_drops = {(device, c) for c in drops}
        if new and not placed and not any(isinstance(a, Send) and a.client == cid and
                                          isinstance(a.message, p.LockGranted) for a in actions):
            self.claim(device, cid)  # it waits
        self.apply(actions)
        assert not self.gap_drops, f"the lender back did not have {self.gap_drops} drop"

    @precondition(lambda self: self.connected)
    @rule(data=st.data(), device=st.sampled_from(DEVICES),
          reason=st.sampled_from(list(p.ReleaseReason)), again=st.booleans())
    def release(self, data, device, reason, again):
        """A release by a holder or a stray one; a holder may ask again at once, as a busy
        program does, and so queue with the most usage."""
        stray = data.draw(st.booleans()) or not self.holders[device]
        cid = data.draw(st.sampled_from(sorted(self.connected if stray else self.holders[device])))
        hold = self.holders[device].get(cid)
        holds = self.end_hold(device, cid)
        actions = self.policy.lock_released(cid, device, reason, self.now)
        if not holds:
            assert not [a for a in actions if isinstance(a, Send)], "a stray release acted"
        else:
            self.lent(device, cid, hold, reason)
        self.apply(actions)
        if holds and again:
            self.ask(device, cid)

    def lent(self, device: int, cid: int, hold: Hold, reason: p.ReleaseReason) -> None:
        """Whether a release lends its gap is the core's to say (its gap estimate); a loan lasts
        the rest of the lender's turn, and only an early release by a holder not dropped, while
        no other loan runs, starts one."""
        loan = self.policy.gap_rules.loans.get(device)
        if loan is None or loan.lender != cid:
            return
        assert reason == p.ReleaseReason.IDLE and hold.dropped_at is None, "a loan at a drop"
        assert self.loans.active(device, self.now) is None, "a loan during another"
        assert loan.until == hold.granted_at + (self.tq if hold.turn is None else hold.turn)
        self.loans.began(device, cid, loan.until)

    @precondition(lambda self: len(self.connected) > 3)  # keep some contention
    @rule(data=st.data())
    def disconnect(self, data):
        cid = data.draw(st.sampled_from(sorted(self.connected)))
        self.connected.discard(cid)
        self.gone.add(cid)
        for device in DEVICES:
            self.queues[device][:] = [e for e in self.queues[device] if e[0] != cid]
            self.holders[device].pop(cid, None)
        self.shares.forget(cid)
        self.loans.forget(cid)
        self.apply(self.policy.disconnect(cid, self.now))

    # One rule for both settings, so that changes do not crowd out the turns they change.
    @rule(tq=st.none() | st.integers(1, 4), mode=st.none() | st.sampled_from(list(p.Mode)))
    def configure(self, tq, mode):
        if tq is not None:
            self.stuck.clear()  # the bound on waiting holds for an unchanged TQ
        if mode is p.Mode.OFF:
            for device in DEVICES:
                self.queues[device].clear()
                for cid in list(self.holders[device]):
                    self.end_hold(device, cid, by_itself=False)
                self.loans.device_gone(device)
        elif (tq, mode) != (None, None) and (tq or self.tq, mode or self.policy.mode) != \
                (self.tq, self.policy.mode):  # a running quantum is TQ long again
            for holders in self.holders.values():
                for hold in holders.values():
                    if hold.dropped_at is None:
                        hold.turn = None
        self.apply(self.policy.configure(self.now, tq=tq, mode=mode))

    # ----- invariants -----------------------------------------------------------------------

    @invariant()
    def matches_the_model(self):
        for device in DEVICES:
            dev = self.policy.devices.get(device)
            assert (list(dev.holders) if dev else []) == list(self.holders[device])
            assert (list(dev.waiters) if dev else []) == [e[0] for e in self.queues[device]]
            dropping = [c for c, h in dev.holders.items() if h.dropped_at is not None] \
                if dev else []
            assert dropping == [c for c, h in self.holders[device].items()
                                if h.dropped_at is not None]

    @invariant()
    def holders_not_asked_to_drop_fit(self):
        for device in DEVICES:
            assert self.fits(device, self.active(device)), \
                f"device {device}: holders {self.active(device)} do not fit"

    @invariant()
    def nobody_is_left_waiting_whom_the_rule_admits(self):
        if self.policy.mode is p.Mode.OFF:
            return
        for device in DEVICES:
            holding = list(self.holders[device])
            assert holding or not self.queues[device], "waiters behind a free lock"
            for cid, since, *_ in self.queues[device]:
                assert not self.fits(device, holding + [cid]), f"{cid} fits but waits"
                if self.now - since >= self.tq:
                    break

    @invariant()
    def a_head_that_has_waited_a_quantum_is_served_within_another_and_grace(self):
        for device in DEVICES:
            queue = self.queues[device]
            if not queue or self.now - queue[0][1] < self.tq:
                self.stuck.pop(device, None)
                continue
            if self.stuck.get(device, (None,))[0] != queue[0][0]:
                self.stuck[device] = (queue[0][0], self.now)
            head, seen = self.stuck[device]
            # A drop may give its holder time to move out what it has (13 GiB at most here).
            most_moved = 13 * G / DEFAULT_TO_HOST_BPS
            assert self.now <= seen + self.tq + GRACE + most_moved, \
                f"client {head} waits without end"

    @invariant()
    def nothing_overdue(self):
        for device in DEVICES:
            for hold in self.holders[device].values():
                if hold.dropped_at is not None:
                    assert self.now < hold.revoke_at, "revocation overdue"
                elif self.queues[device]:
                    assert self.now < self.turn_end(hold), "drop overdue"

    @invariant()
    def only_connected_clients_are_known(self):
        assert set(self.policy.clients) == self.connected

    @invariant()
    def usage_is_what_the_holds_make_it(self):
        for cid in self.connected:
            for device in DEVICES:
                assert self.policy.usage.read(cid, device, self.now) == \
                    self.shares.read(cid, device, self.now)


class LimitedAutoMachine(AutoMachine):
    """The same rules under a --capacity-mib that is lower than NVML's device and than some
    reported totals, higher than others, and stands in where nothing is known."""
    LIMIT = 10 * G


for machine in (AutoMachine, LimitedAutoMachine):
    machine.TestCase.settings = settings(max_examples=100, stateful_step_count=200,
                                         deadline=None)
TestAutoInvariants = AutoMachine.TestCase
TestLimitedAutoInvariants = LimitedAutoMachine.TestCase
