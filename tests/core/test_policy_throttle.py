"""What a client says of its idleness is checked against what the scheduler saw, and a client
that takes the device back right after giving it up is throttled (gaps.py, throttle.py): the
abuse it answers: a client holding 50 ms, claiming 60 s of idleness at each release and
asking again at once, which dropped a program beside it 38 times."""

import re

import pytest
from policy_driver import Driver

from gemshare_nvs import protocol as p
from gemshare_nvs.core.rules.checks.throttle import QUICK_RETURN_S, QUICK_RETURNS

G = 1 << 30
MINUTE_US = 60_000_000


def bounce(driver: Driver, cid: int, hold_s: float = 0.05, idle_us: int = MINUTE_US,
           back_after_s: float = 0.0) -> None:
    """`cid`, holding, keeps the device `hold_s`, lets it go as idle claiming `idle_us`, and
    asks again `back_after_s` later."""
    driver.advance(hold_s)
    driver.release(cid, reason=p.ReleaseReason.IDLE, idle_us=idle_us)
    driver.advance(back_after_s)
    driver.request(cid)


def test_an_idleness_claimed_past_the_hold_counts_only_as_long_as_the_hold():
    driver = Driver(tq=30)
    driver.register(1)
    for _ in range(3):
        driver.request(1)
        driver.advance(0.05)
        driver.release(1, reason=p.ReleaseReason.IDLE, idle_us=MINUTE_US)
        driver.advance(0.01)
    driver.request(1)
    # Each gap: the 50 ms held (all of it idle at most) and the 10 ms away, not a minute.
    assert driver.policy.gaps.expected(1, 0) == pytest.approx(0.06)


def test_a_shorter_idleness_than_the_hold_is_taken_at_its_word():
    driver = Driver(tq=30)
    driver.register(1)
    driver.request(1)
    driver.advance(2.0)
    driver.release(1, reason=p.ReleaseReason.IDLE, idle_us=300_000)
    driver.advance(1.0)
    driver.request(1)
    assert driver.policy.gaps.expected(1, 0) == pytest.approx(1.3)


def two_clients() -> Driver:
    """Client 1 busy on the device for 10 s, client 2 under its share."""
    driver = Driver(tq=30)
    driver.register(1)
    driver.register(2)
    driver.request(1)
    driver.advance(10)
    driver.take_sent()
    return driver


def test_the_lying_client_is_throttled_after_quick_returns_and_claims_nothing():
    driver = Driver(tq=30)
    driver.register(2)  # the liar, alone at first
    driver.request(2)
    for _ in range(QUICK_RETURNS):
        bounce(driver, 2)
    assert driver.policy.returns.throttled(2, 0)
    assert any("throttle client 2" in log.text for log in driver.logs)
    driver.register(1)
    driver.request(1)  # the victim waits for the liar's hold
    bounce(driver, 2)  # the victim is granted; the liar asks again at once
    assert driver.holders() == [1] and driver.waiters() == [2]
    hold = driver.policy.devices[0].holders[1]
    assert hold.preempt_at == float("inf")  # under its share, but no claim on the victim
    driver.take_sent()
    driver.advance(29)
    assert driver.take_sent() == []
    driver.advance(1)
    assert driver.take_sent() == [(1, p.DropLock(0))]  # at the end of the victim's quantum


def test_a_client_under_its_share_that_returns_at_once_claims_only_until_throttled():
    driver = two_clients()
    claims = 0
    driver.request(2)
    for _ in range(QUICK_RETURNS + 2):
        hold = driver.policy.devices[0].holders[1]
        if hold.preempt_at == float("inf"):
            break
        claims += 1
        driver.advance_to_deadline()
        driver.release(1)
        driver.request(1)
        bounce(driver, 2)
    # Its first request and its quick returns before the throttle, no more.
    assert claims == QUICK_RETURNS
    assert driver.holders() == [1] and driver.waiters() == [2]


def test_a_return_later_than_the_quick_one_ends_the_throttle():
    driver = Driver(tq=30)
    driver.register(2)
    driver.request(2)
    for _ in range(QUICK_RETURNS):
        bounce(driver, 2)
    assert driver.policy.returns.throttled(2, 0)
    bounce(driver, 2, back_after_s=2 * QUICK_RETURN_S)
    assert not driver.policy.returns.throttled(2, 0)


def test_a_drop_then_a_request_at_once_is_no_quick_return():
    driver = Driver(tq=1)
    driver.register(1)
    driver.register(2)
    driver.request(1)
    driver.request(2)
    for _ in range(QUICK_RETURNS + 1):
        driver.advance_to_deadline()
        dropped = [c for c, m in driver.take_sent() if isinstance(m, p.DropLock)]
        assert len(dropped) == 1
        driver.release(dropped[0])  # as a busy program does, it asks again at once
        driver.request(dropped[0])
    assert not driver.policy.returns.throttled(1, 0)
    assert not driver.policy.returns.throttled(2, 0)


def evicted_for(driver: Driver, victim: int, beneficiary: int) -> list[int]:
    """The bytes each EVICT asked of `victim` to make room for `beneficiary`, from the log."""
    pattern = re.compile(rf"evict client {victim} .*?: device 0, (\d+) MiB to the host to make "
                         rf"room for client {beneficiary} ")
    return [int(found[1]) << 20 for log in driver.logs if (found := pattern.match(log.text))]


def test_the_room_moved_for_a_throttled_client_counts_against_its_share():
    driver = Driver(tq=30, mode=p.Mode.AUTO, limit=24 * G, answer_evictions=True)
    driver.register(1)
    driver.register(2)
    driver.mem(1, 16 * G)
    driver.request(1)
    driver.advance(1)
    driver.release(1)  # the victim, idle, with 16 GiB on the device
    driver.mem(2, 16 * G)
    driver.request(2)
    for _ in range(QUICK_RETURNS):
        bounce(driver, 2)
    assert driver.policy.returns.throttled(2, 0)
    # Its first grant moved the victim out before it was throttled: nothing charged for it.
    assert evicted_for(driver, 1, 2) and driver.policy.returns.charged(2, 0, driver.now) == 0
    driver.request(1)  # the victim waits for the liar's hold
    bounce(driver, 2)  # the victim is granted, room made of the liar's memory; the liar asks
    assert driver.holders() == [1]
    held = driver.policy.usage.read(2, 0, driver.now)
    before = len(evicted_for(driver, 1, 2))
    driver.advance(1)
    driver.release(1)  # the liar is granted once room is made of the victim's memory
    assert driver.holders() == [2]
    moved = evicted_for(driver, 1, 2)[before:]
    assert moved
    expected = sum(driver.policy.room_rules.link(0).switch_seconds(size, size) for size in moved)
    assert driver.policy.returns.charged(2, 0, driver.now) == pytest.approx(expected, rel=0.01)
    # Charged apart from its lock time, which stays what its holds made it.
    assert driver.policy.usage.read(2, 0, driver.now) <= held
