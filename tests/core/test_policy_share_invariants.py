"""Property tests of the shares, with share preemption on: random requests, releases, drops
answered or not, weights, gpu limits and disconnects on a fake clock (mode `on`, one device).

Checked after every step, and as messages go out:

- one holder at most, and a free lock has no waiter it could grant;
- a holder is dropped only after running at least the minimum slice, or at its gpu_limit;
- a waiter is passed (a client under its share goes ahead of it) only in its first TQ of waiting;
- nobody starves: from when its gpu_limit, if any, no longer pauses it, a waiter is granted
  within (1 + a + p) x (TQ + grace): one turn for the holder then, one for each of the a waiters
  then ahead of it and one for each of the p passes of it since (docs/scheduling.md);
- after the timers fire, no deadline is already due (the shell's timer would spin);
- usage stays between 0 and the saturated usage, and only holders' usage grows.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gemshare_nvs import protocol as p
from gemshare_nvs.core.model.actions import Send
from gemshare_nvs.core.policy import Policy
from gemshare_nvs.core.rules.shares import limit_levels
from gemshare_nvs.core.rules.usage import SATURATED_S

CLIENT_IDS = st.integers(1, 6)
TQ, GRACE, MIN_SLICE_MS = 2, 0.5, 300


class ShareMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.policy = Policy(tq=TQ, mode=p.Mode.ON, grace_s=GRACE, max_clients=16,
                             min_slice_ms=MIN_SLICE_MS)
        self.now = 0.0
        self.connected: set[int] = set()
        self.asked: dict[int, float] = {}  # waiting client -> when it asked
        self.ahead: dict[int, set[int]] = {}  # waiting client -> those ahead of it, last seen
        # Waiting client -> (when its gpu_limit last stopped pausing it, turns it may wait for);
        # None while paused.
        self.bound: dict[int, list | None] = {}
        self.holder: tuple[int, float] | None = None  # (client, granted at)
        self.dropped: set[int] = set()

    def apply(self, actions: list) -> None:
        for action in actions:
            if not isinstance(action, Send):
                continue
            cid, message = action.client, action.message
            assert cid in self.connected
            if isinstance(message, p.LockGranted):
                assert self.holder is None, "a second holder"
                self.check_wait(cid)  # its wait ends: the bound matters most now
                self.asked.pop(cid)
                self.holder = (cid, self.now)
            elif isinstance(message, p.DropLock):
                holder, granted_at = self.holder
                assert holder == cid
                limit = self.policy.clients[cid].terms.gpu_limit
                at_limit = limit is not None and self.policy.usage.read(cid, 0, self.now) >= \
                    limit_levels(limit)[0] - 1e-6
                assert at_limit or self.now - granted_at >= MIN_SLICE_MS / 1000 - 1e-9, \
                    f"dropped after {self.now - granted_at:.3f} s"
                self.dropped.add(cid)
            elif isinstance(message, p.LockRevoked):
                self.end_hold(cid)

    def end_hold(self, cid: int) -> None:
        assert self.holder and self.holder[0] == cid
        self.holder = None
        self.dropped.discard(cid)

    @rule(cid=CLIENT_IDS)
    def register(self, cid):
        if cid in self.connected:
            return
        self.connected.add(cid)
        self.apply(self.policy.register(cid, 100 + cid, 1000, 1000,
                                        p.Register(0, 0, "p", "", "", ""), self.now, 0.0))

    @property
    def idle(self) -> set[int]:
        """Connected clients that neither hold nor wait."""
        return self.connected - set(self.asked) - ({self.holder[0]} if self.holder else set())

    @precondition(lambda self: self.idle)
    @rule(data=st.data())
    def request(self, data):
        self.ask(data.draw(st.sampled_from(sorted(self.idle))))

    def ask(self, cid: int) -> None:
        self.asked[cid] = self.now
        self.apply(self.policy.request_lock(cid, 0, self.now))

    @precondition(lambda self: self.holder is not None)
    @rule(again=st.booleans())
    def release(self, again):
        """The holder answers its drop, or releases early when it was not dropped; it may ask
        again at once, as a busy program does."""
        cid = self.holder[0]
        reason = p.ReleaseReason.DROPPED if cid in self.dropped else p.ReleaseReason.IDLE
        self.end_hold(cid)
        self.apply(self.policy.lock_released(cid, 0, reason, self.now))
        if again:
            self.ask(cid)

    @precondition(lambda self: self.connected)
    @rule(data=st.data(), weight=st.sampled_from([0.5, 1, 2, 4]),
          limit=st.sampled_from([None, 0.2, 0.5, 0.9]))
    def set_terms(self, data, weight, limit):
        cid = data.draw(st.sampled_from(sorted(self.connected)))
        self.apply(self.policy.override(100 + cid, {"weight": weight, "gpu_limit": limit},
                                        self.now))

    @precondition(lambda self: len(self.connected) > 2)  # keep some contention
    @rule(data=st.data())
    def disconnect(self, data):
        cid = data.draw(st.sampled_from(sorted(self.connected)))
        self.connected.discard(cid)
        self.asked.pop(cid, None)
        if self.holder and self.holder[0] == cid:
            self.end_hold(cid)
        self.apply(self.policy.disconnect(cid, self.now))

    @rule(step=st.integers(1, 3000), to_deadline=st.booleans())
    def advance(self, step, to_deadline):
        deadline = self.policy.next_deadline()
        idle = {cid: self.policy.usage.read(cid, 0, self.now) for cid in self.connected
                if not (self.holder and self.holder[0] == cid)}
        if deadline is not None and (to_deadline or self.now + step / 1000 >= deadline):
            self.now = deadline
        else:
            self.now += step / 1000
        for cid, usage in idle.items():
            assert self.policy.usage.read(cid, 0, self.now) <= usage + 1e-9, "usage grew idle"
        self.apply(self.policy.tick(self.now))
        after = self.policy.next_deadline()
        assert after is None or after > self.now, "a deadline already due after the tick"

    def check_wait(self, cid: int) -> None:
        """A waiter that its gpu_limit does not pause has waited no more turns than it may."""
        bound = self.bound.get(cid)
        if bound is not None:
            start, turns = bound
            assert self.now - start <= turns * (TQ + GRACE) + 1e-6, \
                f"client {cid} waits {self.now - start:.3f} s, over {turns} turns"

    @invariant()
    def nobody_starves(self):
        """Who is ahead of each waiter, kept up after every step: the queue changes only by
        grants, which take waiters from ahead of the others, and by passes, which put a waiter
        ahead of some (in a request, which grants nobody else)."""
        dev = self.policy.devices.get(0)
        order = list(dev.waiters) if dev else []
        for cid in set(self.ahead) - set(self.asked):
            del self.ahead[cid], self.bound[cid]
        for cid, since in self.asked.items():
            ahead = set(order[:order.index(cid)])
            passes = len(ahead - self.ahead.get(cid, ahead))
            self.ahead[cid] = ahead
            assert not passes or self.now - since < TQ, \
                f"client {cid} passed after waiting {self.now - since:.3f} s"
            if self.policy._eligible_at(cid, 0) > self.now:
                self.bound[cid] = None  # paused by its gpu_limit: it may not be granted yet
            elif self.bound.get(cid) is None:
                self.bound[cid] = [self.now, 1 + len(ahead)]
            else:
                self.bound[cid][1] += passes
            self.check_wait(cid)

    @invariant()
    def a_free_lock_has_no_grantable_waiter(self):
        if self.holder is None:
            dev = self.policy.devices.get(0)
            waiting = list(dev.waiters) if dev else []
            assert all(self.policy._eligible_at(cid, 0) > self.now for cid in waiting)

    @invariant()
    def usage_stays_in_bounds(self):
        for cid in self.connected:
            assert 0 <= self.policy.usage.read(cid, 0, self.now) <= SATURATED_S + 1e-9


ShareMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=60,
                                          deadline=None)
TestShareInvariants = ShareMachine.TestCase
