"""A holder that waits for a device of a higher index keeping what it holds (REQUEST_KEEPING:
libnvs takes the locks of a copy between devices in device order) keeps those locks until it
has that one too."""

from policy_driver import Driver

from gemshare_nvs import protocol as p

TQ = 5


def dropped(driver: Driver, cid: int) -> list[int]:
    """Devices `cid` was asked to drop since the last look (its other messages are dropped)."""
    return [m.device for m in driver.take_sent(cid) if isinstance(m, p.DropLock)]


def asked(requests: list[tuple[int, int, bool]]) -> Driver:
    """Clients 1 and 2 after these requests (client, device, keeping), in order; shares preempt
    nobody within the quantum."""
    driver = Driver(tq=TQ, min_slice_ms=TQ * 1000)
    for cid in (1, 2):
        driver.register(cid)
    for cid, device, keeping in requests:
        driver.request(cid, device=device, keeping=keeping)
    driver.take_sent()
    return driver


def crossed(keeping: bool) -> Driver:
    """Client 1 holds device 0 and waits for 1; client 2 holds device 1 and waits for 0; each
    keeping what it holds when `keeping`."""
    return asked([(1, 0, False), (2, 1, False), (1, 1, keeping), (2, 0, keeping)])


def test_only_the_holder_of_the_higher_device_is_dropped_at_the_end_of_the_quanta():
    driver = crossed(keeping=True)
    driver.advance(TQ)
    assert (dropped(driver, 1), dropped(driver, 2)) == ([], [1])
    driver.release(2, device=1)
    assert driver.holders(1) == [1]  # client 1 holds both now, and copies
    # No longer waiting above device 0, its turn there is over at once.
    assert driver.policy.next_deadline() <= driver.now
    driver.advance(0)
    assert dropped(driver, 1) == [0]
    driver.release(1, device=0)
    assert driver.holders(0) == [2]


def test_without_keeping_both_holders_are_dropped_as_before():
    driver = crossed(keeping=False)
    driver.advance(TQ)
    assert (dropped(driver, 1), dropped(driver, 2)) == ([0], [1])


def test_a_kept_holder_sets_no_timer_that_is_already_due():
    """Past its quantum, kept: the scheduler must not wake at once, and again, for nothing."""
    driver = crossed(keeping=True)
    driver.advance(TQ)
    driver.take_sent()
    # Client 2 was dropped and has not released yet: the next timer is its revocation.
    assert driver.policy.next_deadline() > driver.now + 1


def test_a_waiter_that_starts_keeping_later_is_kept_from_then_on():
    """One thread of client 1 waited for device 1 first; then a copy waits there too."""
    driver = crossed(keeping=False)
    driver.request(1, device=1, keeping=True)
    driver.advance(TQ)
    assert (dropped(driver, 1), dropped(driver, 2)) == ([], [1])


def test_keeping_for_a_lower_device_keeps_nothing():
    """Client 2 holds device 1 and waits for 0, keeping: only an order keeps the chain
    finite, so it is dropped from 1 as before (libnvs lets go when a kept gate closes)."""
    driver = asked([(1, 0, False), (2, 1, False), (2, 0, True), (1, 1, False)])
    driver.advance(TQ)
    assert (dropped(driver, 1), dropped(driver, 2)) == ([0], [1])
