"""Property tests of the policy core: random event sequences against a simple model.

The model keeps the FCFS queue and the holder of each device the way the rules describe them;
every message the core sends is checked against it as it happens:

- in `on`/`auto` at most one holder per device, and a free lock never has waiters;
- grants go to the head of the queue only (FCFS), with GRANT_AFTER_WAIT exactly when the client
  queued behind someone;
- nothing is ever sent to a client after it disconnected;
- DROP_LOCK only when someone waits and the quantum is over (no needless drop), never late;
- revocation exactly `grace` after the drop, never earlier, never later.

Share preemption is off here, so that turns are strict FCFS for a whole quantum; the shares
have their own machine in test_policy_share_invariants.py.

The clock only moves up to the core's next deadline, so "never late" is checkable: the model's
own deadline must equal `next_deadline()` before every step of the clock.
"""

from __future__ import annotations

from hypothesis import settings, strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from gemshare_nvs import protocol as p
from gemshare_nvs.actions import Send
from gemshare_nvs.policy import Policy

from clock_machine import ClockMachine

DEVICES = st.integers(0, 1)
CLIENT_IDS = st.integers(1, 6)
GRACE = 0.75


class PolicyMachine(ClockMachine):
    def __init__(self):
        super().__init__()
        self.policy = Policy(tq=3, mode=p.Mode.ON, grace_s=GRACE, max_clients=16,
                             share_preemption=False)
        self.now = 0.0
        self.connected: set[int] = set()
        self.gone: set[int] = set()
        self.queues: dict[int, list[tuple[int, bool]]] = {}  # device -> [(client, queued)]
        self.holder: dict[int, int] = {}  # device -> client
        self.granted_at: dict[int, float] = {}  # device -> time
        self.dropped_at: dict[int, float] = {}  # device -> time

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
        assert queue and queue[0][0] == cid, f"grant to {cid} out of FCFS order {queue}"
        _, queued = queue.pop(0)
        assert bool(message.flags & p.GRANT_AFTER_WAIT) == queued
        assert message.quantum_ms == self.policy.tq * 1000
        self.holder[device] = cid
        self.granted_at[device] = self.now

    def check_drop(self, cid: int, device: int) -> None:
        assert self.holder.get(device) == cid
        assert self.queues.get(device), "needless drop: nobody waits"
        assert self.now >= self.granted_at[device] + self.policy.tq, "drop before quantum end"
        assert device not in self.dropped_at, "second drop for one hold"
        self.dropped_at[device] = self.now

    def check_revoke(self, cid: int, device: int) -> None:
        assert self.holder.get(device) == cid
        assert self.now == self.dropped_at[device] + GRACE, "revocation not exactly at grace"
        self.end_hold(device)

    def end_hold(self, device: int) -> None:
        del self.holder[device]
        self.granted_at.pop(device)
        self.dropped_at.pop(device, None)

    def model_deadline(self) -> float | None:
        due = []
        for device, cid in self.holder.items():
            if device in self.dropped_at:
                due.append(self.dropped_at[device] + GRACE)
            elif self.queues.get(device):
                due.append(self.granted_at[device] + self.policy.tq)
        return min(due, default=None)

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
        cid = data.draw(st.sampled_from(sorted(self.connected)))
        queue = self.queues.setdefault(device, [])
        if self.policy.mode is not p.Mode.OFF and self.holder.get(device) != cid \
                and all(c != cid for c, _ in queue):
            queue.append((cid, bool(queue) or device in self.holder))
        self.apply(self.policy.request_lock(cid, device, self.now))

    @precondition(lambda self: self.connected)
    @rule(data=st.data(), device=DEVICES, reason=st.sampled_from(list(p.ReleaseReason)))
    def release(self, data, device, reason):
        cid = data.draw(st.sampled_from(sorted(self.connected)))
        holds = self.holder.get(device) == cid
        if holds:
            self.end_hold(device)
        actions = self.policy.lock_released(cid, device, reason, self.now)
        if not holds:
            assert not [a for a in actions if isinstance(a, Send)], "a stray release acted"
        self.apply(actions)

    @precondition(lambda self: self.connected)
    @rule(data=st.data())
    def disconnect(self, data):
        cid = data.draw(st.sampled_from(sorted(self.connected)))
        self.connected.discard(cid)
        self.gone.add(cid)
        for device, queue in self.queues.items():
            queue[:] = [(c, q) for c, q in queue if c != cid]
        for device in [d for d, c in self.holder.items() if c == cid]:
            self.end_hold(device)
        self.apply(self.policy.disconnect(cid, self.now))

    @rule(tq=st.integers(1, 6))
    def set_tq(self, tq):
        self.apply(self.policy.configure(self.now, tq=tq))

    @rule(mode=st.sampled_from(list(p.Mode)))
    def set_mode(self, mode):
        if mode is p.Mode.OFF:
            self.queues.clear()
            for device in list(self.holder):
                self.end_hold(device)
        self.apply(self.policy.configure(self.now, mode=mode))

    # ----- invariants ----------------------------------------------------------------------

    @invariant()
    def matches_the_model(self):
        for device in (0, 1):
            dev = self.policy.devices.get(device)
            holders = list(dev.holders) if dev else []
            waiters = list(dev.waiters) if dev else []
            assert len(holders) <= 1
            assert holders == ([self.holder[device]] if device in self.holder else [])
            assert waiters == [c for c, _ in self.queues.get(device, [])]
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
                assert self.now < self.granted_at[device] + self.policy.tq, "drop overdue"

    @invariant()
    def only_connected_clients_are_known(self):
        assert set(self.policy.clients) == self.connected


PolicyMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=60,
                                           deadline=None)
TestPolicyInvariants = PolicyMachine.TestCase
