"""Property tests of the policy core: random event sequences against a simple model.

The model keeps the queue and the holder of each device the way the rules describe them;
every message the core sends is checked against it as it happens:

- in `on`/`auto` at most one holder per device, and a free lock never has waiters;
- grants go to the head of the queue only, with GRANT_AFTER_WAIT exactly when the client queued
  behind someone; the queue is first come first served but for the share rule (share_model.py):
  a waiter that asks clearly under the usage of the waiters at the back goes ahead of them, if
  each of them has waited less than a TQ;
- nothing is ever sent to a client after it disconnected;
- DROP_LOCK only when someone waits and the quantum is over, or the minimum slice is, for a
  holder that a waiter at the head was clearly under when it asked (no needless drop), never
  late;
- revocation exactly `grace` after the drop, never earlier, never later;
- each client's usage is what the grants and releases seen make it.

This is the policy as the scheduler runs it; weights and limits have their own machine in
test_policy_share_invariants.py.

The clock only moves up to the core's next deadline, so "never late" is checkable: the model's
own deadline must equal `next_deadline()` before every step of the clock.
"""

from __future__ import annotations

import math

from clock_machine import ClockMachine
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule
from share_model import ShareModel

from gemshare_nvs import protocol as p
from gemshare_nvs.config.settings import DEFAULT_MIN_SLICE_MS
from gemshare_nvs.core.model.actions import Send
from gemshare_nvs.core.policy import Policy

DEVICES = st.integers(0, 1)
CLIENT_IDS = st.integers(1, 6)
GRACE = 0.75
MIN_SLICE = DEFAULT_MIN_SLICE_MS / 1000  # no memory here, so no switch to lengthen it


class PolicyMachine(ClockMachine):
    def __init__(self):
        super().__init__()
        self.policy = Policy(tq=3, mode=p.Mode.ON, grace_s=GRACE, max_clients=16)
        self.now = 0.0
        self.connected: set[int] = set()
        self.gone: set[int] = set()
        # device -> [[client, queued, since, passed (a waiter under its share went ahead of it)]]
        self.queues: dict[int, list[list]] = {}
        self.holder: dict[int, int] = {}  # device -> client
        self.granted_at: dict[int, float] = {}  # device -> time
        self.dropped_at: dict[int, float] = {}  # device -> time
        self.preempt_at: dict[int, float] = {}  # device -> end of the holder's minimum slice
        self.shares = ShareModel(lambda cid, device, now:
                                 self.policy.returns.charged(cid, device, now))

    # ----- checking what the core sends -----------------------------------------------------

    def apply(self, actions: list) -> None:
        for action in actions:
            if not isinstance(action, Send):
                continue
            cid, message = action.client, action.message
            assert cid in self.connected, f"{message} sent to client {cid}, which is not connected"
            assert cid not in self.gone
            if isinstance(message, p.LockGranted):
                self.check_grant(cid, message)
            elif isinstance(message, p.DropLock):
                self.check_drop(cid, message.device)
            elif isinstance(message, p.LockRevoked):
                self.check_revoke(cid, message.device)

    def check_grant(self, cid: int, message: p.LockGranted) -> None:
        device = message.device
        assert self.policy.mode is not p.Mode.OFF
        assert device not in self.holder, "a second holder on one device"
        queue = self.queues.get(device, [])
        assert queue and queue[0][0] == cid, f"grant to {cid} out of order {queue}"
        _, queued, *_ = queue.pop(0)
        assert bool(message.flags & p.GRANT_AFTER_WAIT) == queued
        assert message.quantum_ms == self.policy.tq * 1000
        self.holder[device] = cid
        self.granted_at[device] = self.now
        self.shares.granted(cid, device, self.now)
        self.press(device)

    def turn_end(self, device: int) -> float:
        """When the holder is dropped if someone waits: its quantum's end, or its slice's."""
        return min(self.granted_at[device] + self.policy.tq,
                   self.preempt_at.get(device, math.inf))

    def check_drop(self, cid: int, device: int) -> None:
        assert self.holder.get(device) == cid
        assert self.queues.get(device), "needless drop: nobody waits"
        assert self.now >= self.turn_end(device), "drop before the quantum's or slice's end"
        assert device not in self.dropped_at, "second drop for one hold"
        self.dropped_at[device] = self.now

    def check_revoke(self, cid: int, device: int) -> None:
        assert self.holder.get(device) == cid
        assert self.now == self.dropped_at[device] + GRACE, "revocation not exactly at grace"
        self.end_hold(device)

    def end_hold(self, device: int, by_itself: bool = True) -> None:
        """`by_itself` unless the scheduler ended the hold without a drop (mode off)."""
        self.shares.ended(self.holder.pop(device), device, self.now,
                          let_go=by_itself and device not in self.dropped_at)
        self.granted_at.pop(device)
        self.dropped_at.pop(device, None)
        self.preempt_at.pop(device, None)

    def model_deadline(self) -> float | None:
        due = []
        for device, cid in self.holder.items():
            if device in self.dropped_at:
                due.append(self.dropped_at[device] + GRACE)
            elif self.queues.get(device):
                due.append(self.turn_end(device))
        return min(due, default=None)

    def claim(self, device: int, cid: int) -> None:
        """The share rule, for `cid`, which has just asked and waits at the back of the queue."""
        queue = self.queues[device]
        entries = {entry[0]: entry for entry in queue}
        order = self.shares.claimed(device, list(entries),
                                    {c: entry[2] for c, entry in entries.items()},
                                    self.now, self.policy.tq,
                                    {c for c, entry in entries.items() if entry[3]})
        for passed in order[order.index(cid) + 1:]:
            entries[passed][3] = True
        queue[:] = [entries[c] for c in order]
        if order[0] == cid:
            self.press(device)

    def press(self, device: int) -> None:
        """The waiter at the head has the holder clearly busier than it drop after a minimum
        slice: when it asks, and again whenever a new holder is granted."""
        queue, holder = self.queues.get(device), self.holder.get(device)
        if queue and holder is not None and device not in self.dropped_at and \
                self.shares.preempted(device, queue[0][0], [holder], self.now):
            self.preempt_at[device] = min(self.preempt_at.get(device, math.inf),
                                          self.granted_at[device] + MIN_SLICE)

    # ----- events ------------------------------------------------------------------------

    @initialize()
    def some_clients(self):
        for cid in (1, 2, 3):  # contention from the start; more arrive and leave later
            self.register(cid)

    @rule(cid=CLIENT_IDS)
    def register(self, cid):
        if cid in self.connected or cid in self.gone:
            return
        self.connected.add(cid)
        self.apply(self.policy.register(cid, 1000 + cid, 1000, 1000, p.Register(0, 0, "x"),
                                        self.now, 0.0))

    @precondition(lambda self: self.connected)
    @rule(data=st.data(), device=DEVICES)
    def request(self, data, device):
        queue = self.queues.setdefault(device, [])
        idle = self.connected - {self.holder.get(device)} - {entry[0] for entry in queue}
        self.ask(device, data.draw(st.sampled_from(sorted(idle or self.connected))))

    def ask(self, device: int, cid: int) -> None:
        """`cid` asks for the device (again, now and then)."""
        queue = self.queues[device]
        waits = False
        if self.policy.mode is not p.Mode.OFF and self.holder.get(device) != cid \
                and all(entry[0] != cid for entry in queue):
            waits = bool(queue) or device in self.holder
            queue.append([cid, waits, self.now, False])
            self.shares.asked(cid, device, self.now)
        actions = self.policy.request_lock(cid, device, self.now)
        if waits:
            self.claim(device, cid)
        self.apply(actions)

    @precondition(lambda self: self.connected)
    @rule(data=st.data(), device=DEVICES, reason=st.sampled_from(list(p.ReleaseReason)),
          again=st.booleans())
    def release(self, data, device, reason, again):
        """A release by the holder or a stray one; a holder may ask again at once, as a busy
        program does, and so queue with the most usage."""
        stray = data.draw(st.booleans()) or device not in self.holder
        cid = data.draw(st.sampled_from(sorted(self.connected))) if stray else self.holder[device]
        holds = self.holder.get(device) == cid
        if holds:
            self.end_hold(device)
        actions = self.policy.lock_released(cid, device, reason, self.now)
        if not holds:
            assert not [a for a in actions if isinstance(a, Send)], "a stray release acted"
        self.apply(actions)
        if holds and again:
            self.ask(device, cid)

    @precondition(lambda self: len(self.connected) > 2)  # keep some contention
    @rule(data=st.data())
    def disconnect(self, data):
        cid = data.draw(st.sampled_from(sorted(self.connected)))
        self.connected.discard(cid)
        self.gone.add(cid)
        for device, queue in self.queues.items():
            queue[:] = [entry for entry in queue if entry[0] != cid]
        for device in [d for d, c in self.holder.items() if c == cid]:
            self.end_hold(device)
        self.shares.forget(cid)
        self.apply(self.policy.disconnect(cid, self.now))

    # One rule for both settings, so that changes do not crowd out the turns they change.
    @rule(tq=st.none() | st.integers(1, 6), mode=st.none() | st.sampled_from(list(p.Mode)))
    def configure(self, tq, mode):
        if mode is p.Mode.OFF:
            self.queues.clear()
            for device in list(self.holder):
                self.end_hold(device, by_itself=False)
        self.apply(self.policy.configure(self.now, tq=tq, mode=mode))

    # ----- invariants ----------------------------------------------------------------------

    @invariant()
    def matches_the_model(self):
        for device in (0, 1):
            dev = self.policy.devices.get(device)
            holders = list(dev.holders) if dev else []
            waiters = list(dev.waiters) if dev else []
            assert len(holders) <= 1
            assert holders == ([self.holder[device]] if device in self.holder else [])
            assert waiters == [entry[0] for entry in self.queues.get(device, [])]
            if self.policy.mode is not p.Mode.OFF:
                assert holders or not waiters, "waiters behind a free lock"
            else:
                assert not holders and not waiters

    @invariant()
    def nothing_overdue(self):
        for device, cid in self.holder.items():
            if device in self.dropped_at:
                assert self.now < self.dropped_at[device] + GRACE, "revocation overdue"
            elif self.queues.get(device):
                assert self.now < self.turn_end(device), "drop overdue"

    @invariant()
    def only_connected_clients_are_known(self):
        assert set(self.policy.clients) == self.connected

    @invariant()
    def usage_is_what_the_holds_make_it(self):
        for cid in self.connected:
            for device in (0, 1):
                assert self.policy.usage.read(cid, device, self.now) == \
                    self.shares.read(cid, device, self.now)


PolicyMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=80,
                                           deadline=None)
TestPolicyInvariants = PolicyMachine.TestCase
