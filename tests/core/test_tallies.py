"""The tallies the policy core keeps for reports: how holds ended, granted waits, evictions,
moved bytes and each series' lock time per device, forgotten when its last client leaves."""

from __future__ import annotations

import math

import pytest
from policy_driver import Driver

from gemshare_nvs import protocol as p
from gemshare_nvs.core.tallies import WAIT_BUCKETS, Series, Tallies, WaitHistogram, series_of

G = 1 << 30


def test_a_wait_falls_in_the_first_bucket_that_holds_it():
    histogram = WaitHistogram()
    for seconds in (0.0005, 0.001, 0.0011, 299.0, 301.0, -1.0):
        histogram.add(seconds)
    cumulative = dict(histogram.cumulative())
    assert cumulative[0.001] == 3  # 0.0005, exactly 0.001, and a negative wait taken as 0
    assert cumulative[0.0025] == 4
    assert cumulative[300.0] == 5
    assert cumulative[math.inf] == histogram.count == 6
    assert histogram.total == pytest.approx(0.0005 + 0.001 + 0.0011 + 299.0 + 301.0)
    assert [bound for bound, _ in histogram.cumulative()] == [*WAIT_BUCKETS, math.inf]


TRAIN = Series("ml", "train-0", "python", "")
NOTEBOOK = Series("ml", "nb-0", "python", "notebook")


def test_a_series_keeps_its_time_until_its_last_client_leaves():
    tallies = Tallies()
    for series in (TRAIN, TRAIN, NOTEBOOK):
        tallies.joined(series)
    tallies.hold_ended(0, TRAIN, 2.0, "quantum")
    tallies.hold_ended(1, TRAIN, 3.0, "released")
    tallies.hold_ended(0, NOTEBOOK, 1.0, "idle")
    assert tallies.held_by(TRAIN) == {0: 2.0, 1: 3.0}
    tallies.left(TRAIN)  # one of its two clients: its time stays
    assert tallies.held_by(TRAIN) == {0: 2.0, 1: 3.0}
    tallies.left(TRAIN)
    assert tallies.held_by(TRAIN) == {}
    assert set(tallies.held) == {(NOTEBOOK, 0)}
    assert tallies.ended == {(0, "quantum"): 1, (1, "released"): 1, (0, "idle"): 1}


def series(driver: Driver, cid: int) -> Series:
    client = driver.policy.clients[cid]
    return series_of(client.registration, client.identity.label)


def turns(tq: int = 10) -> Driver:
    """Clients 1 and 2 take turns on device 0: 1 is granted at once, 2 waits, a quantum runs
    out, 1 releases, 2 is granted after waiting. (With a minimum slice of an hour, 2 being
    under its share does not end 1's turn first.)"""
    driver = Driver(tq=tq, min_slice_ms=3_600_000)
    driver.register(1, name="first")
    driver.register(2, name="second")
    driver.request(1)
    driver.advance(1.0)
    driver.request(2)
    driver.advance_to_deadline()  # quantum over: 1 is dropped
    driver.advance(0.5)
    driver.release(1)
    return driver


def test_turns_are_counted_as_they_happen():
    driver = turns()
    policy, tallies = driver.policy, driver.policy.tallies
    assert driver.holders() == [2]
    assert policy.grants == {0: 2}
    assert tallies.ended == {(0, "quantum"): 1}
    histogram = tallies.waits[0]
    assert histogram.count == 1  # 1 was granted at once: no wait
    assert histogram.total == pytest.approx(9.5)  # asked 1 s in, granted 10.5 s in
    assert tallies.held_by(series(driver, 1)) == {0: pytest.approx(10.5)}
    assert tallies.held_by(series(driver, 2)) == {}  # its hold runs: the report adds it


@pytest.mark.parametrize("end, reason", [
    (lambda d: d.release(2, reason=p.ReleaseReason.IDLE), "idle"),
    (lambda d: d.release(2, reason=p.ReleaseReason.DROPPED), "released"),
    (lambda d: d.disconnect(2), "disconnected"),
    (lambda d: d.configure(mode=p.Mode.OFF), "mode"),
])
def test_each_end_of_a_hold_is_counted_by_its_reason(end, reason):
    driver = turns()
    end(driver)
    assert driver.policy.tallies.ended[0, reason] == 1


def test_a_revocation_is_counted_as_one():
    driver = Driver(tq=10, grace=2.0)
    for cid in (1, 2):
        driver.register(cid)
        driver.request(cid)
    driver.advance_to_deadline()  # dropped
    driver.advance_to_deadline()  # no release within the grace period: revoked
    assert driver.policy.revocations == 1
    # The hold ended once, by revocation: the drop before it ended nothing.
    assert driver.policy.tallies.ended == {(0, "revoked"): 1}


def test_a_client_that_leaves_takes_its_time_with_it():
    driver = turns()
    first = series(driver, 1)
    driver.disconnect(1)
    assert driver.policy.tallies.held_by(first) == {}
    driver.advance(2.0)
    driver.disconnect(2)
    assert driver.policy.tallies.held == {}
    assert driver.policy.tallies.ended == {(0, "quantum"): 1, (0, "disconnected"): 1}


def test_evictions_and_moves_are_counted_per_device_and_direction():
    driver = Driver(tq=10, limit=24 * G)
    for cid in (1, 2):
        driver.register(cid)
        driver.mem(cid, 16 * G, total=80 * G)
    driver.request(1)
    driver.request(2)
    driver.release(1, reason=p.ReleaseReason.IDLE)  # its memory is in the way of 2's grant
    tallies = driver.policy.tallies
    assert tallies.evictions == {0: 1}
    (evict,) = [m for cid, m in driver.take_sent() if isinstance(m, p.Evict)]
    driver.moved(1, evict.bytes, done=False)  # progress is not counted: only what is done
    driver.moved(1, evict.bytes)
    driver.moved(2, 3 * G, to_host=False)
    driver.moved(2, 64 * G, to_host=False)  # believed only up to what it has there
    assert tallies.moved == {(0, "to_host"): evict.bytes, (0, "to_device"): 19 * G}
