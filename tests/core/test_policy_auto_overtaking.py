"""Property test of bounded overtaking in mode `auto`, aimed at the one situation it is about.

A holder keeps a 16 GiB device busy; a big client asks at t0 and does not fit beside it; small
clients keep arriving at random times, most of them fitting, and hold or hand back as they
please (some answer DROP_LOCK, some stay silent and are revoked; all answer EVICT, as a client
that does not hold the lock does at once). Whatever the timing:

- a small client is granted ahead of the big one only while the big one has waited less than
  one quantum;
- the big one is granted by t0 + 2 TQ + grace + move: one quantum of being passed, one for the
  quanta already running to end, and the grace of a silent holder, lengthened by the time its
  drop gave it to move its memory out (at most 7 GiB at the assumed rate).

The general state machine (test_policy_auto_invariants.py) checks the same rules among every
other event; this one makes sure that the passing happens often, and right at its edges.
"""

from hypothesis import given, settings
from hypothesis import strategies as st
from policy_driver import Driver

from gemshare_nvs import protocol as p
from gemshare_nvs.core.rules.cost import DEFAULT_TO_HOST_BPS

G = 1 << 30
GRACE = 1.0
HOLDER, BIG = 1, 2

ARRIVALS = st.lists(st.fixed_dictionaries({
    "gap": st.floats(0, 2.5),  # seconds after the previous event
    "gib": st.sampled_from([0, 1, 2, 3, 7]),  # mostly fitting beside the 6 GiB holder
    "answers_drops": st.booleans(),
    "releases_after": st.none() | st.floats(0, 4),  # an early (idle) release, or none
}), min_size=1, max_size=25)


class Scenario:
    def __init__(self, tq: int, big_gib: int):
        self.driver = Driver(tq=tq, mode=p.Mode.AUTO, grace=GRACE, reserve=1 * G)
        self.tq = tq
        self.answers_drops: dict[int, bool] = {HOLDER: False}
        self.releases_at: dict[int, float] = {}  # client -> when it hands back early
        self.big_asked = self.big_granted = None
        self.join(HOLDER, 6, request=True)
        self.big_asked = self.driver.now
        self.join(BIG, big_gib, request=True)

    def join(self, cid: int, gib: int, request: bool) -> None:
        self.driver.register(cid)
        self.driver.mem(cid, gib * G, total=16 * G)
        if request:
            self.driver.request(cid)
        self.check()

    def check(self) -> None:
        """Look at what the core sent; silent and answering clients react as they would."""
        driver = self.driver
        evicts = []
        for cid, message in driver.take_sent():
            if isinstance(message, p.LockGranted):
                if cid == BIG:
                    self.big_granted = driver.now
                elif self.big_asked is not None and self.big_granted is None:
                    waited = driver.now - self.big_asked
                    assert waited < self.tq, f"client {cid} passed the big one after {waited} s"
            elif isinstance(message, p.DropLock) and self.answers_drops.get(cid):
                driver.release(cid)
                self.check()
            elif isinstance(message, p.Evict):
                evicts.append((cid, message.bytes))
        for cid, size in evicts:  # libnvs answers at once when it does not hold the lock
            driver.moved(cid, size, seconds=0)
            self.check()

    def run_until(self, when: float) -> None:
        """Move the clock to `when`, firing every timer and early release on its time."""
        driver = self.driver
        for _ in range(10_000):  # far more events than a scenario has; only catches a loop
            due = [t for t in [driver.policy.next_deadline(), *self.releases_at.values()]
                   if t is not None]
            step = min(due, default=when)
            if step > when:
                break
            driver.now = max(driver.now, step)
            for cid in [c for c, t in self.releases_at.items() if t <= driver.now]:
                del self.releases_at[cid]
                driver.release(cid, reason=p.ReleaseReason.IDLE)
            driver.advance(0)
            self.check()
            if step == when:
                return
        else:
            raise AssertionError("the timers never stopped firing")
        driver.now = when
        driver.advance(0)
        self.check()


@settings(max_examples=300, deadline=None)
@given(tq=st.integers(1, 4), big_gib=st.sampled_from([9, 12, 20]), arrivals=ARRIVALS)
def test_a_waiter_that_does_not_fit_is_passed_only_during_its_first_quantum(tq, big_gib,
                                                                          arrivals):
    scenario = Scenario(tq, big_gib)
    driver = scenario.driver
    for cid, arrival in enumerate(arrivals, start=3):
        scenario.run_until(driver.now + arrival["gap"])
        scenario.answers_drops[cid] = arrival["answers_drops"]
        if arrival["releases_after"] is not None:
            scenario.releases_at[cid] = driver.now + arrival["releases_after"]
        scenario.join(cid, arrival["gib"], request=True)
    bound = scenario.big_asked + 2 * tq + GRACE + 7 * G / DEFAULT_TO_HOST_BPS
    scenario.run_until(max(driver.now, bound))
    assert scenario.big_granted is not None and scenario.big_granted <= bound, \
        (scenario.big_asked, scenario.big_granted, bound)
