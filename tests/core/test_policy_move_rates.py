"""The move rates a device learns from its clients' MOVED reports, which set every client's
deadlines and idle hints: only moves the scheduler asked for teach them, no report can make the
link look faster than a host link goes, and after the first one move pulls them at most fourfold, so a client that
lies cannot cut another's time to move nor make a swap look free, while honest rates far from the
defaults are taken from the first handoff."""

import pytest
from policy_driver import Driver
from test_policy_moves import G, drop_bytes, pair

from gemshare_nvs import protocol as p
from gemshare_nvs.core.rules.cost import CONTENDED_IDLE_RELEASE_MS, DEFAULT_TO_HOST_BPS

INSTANT = 1e-6  # one microsecond: no link moves GiB in that


def revocations(driver: Driver, cid: int) -> list:
    return [m for m in driver.take_sent(cid) if isinstance(m, p.LockRevoked)]


def hand_over(driver: Driver, holder: int, seconds: float) -> int:
    """The holder's quantum ends; it moves out what its drop asks, in `seconds`, and releases.
    Returns the bytes moved."""
    driver.advance_to_deadline()
    out = drop_bytes(driver, holder)
    driver.moved(holder, out, seconds=seconds)
    driver.release(holder)
    return out


def test_a_client_claiming_an_impossible_move_cuts_no_other_clients_deadline():
    driver = pair(grace=2.0)
    out = hand_over(driver, 1, seconds=INSTANT)  # 8.9 GiB in a microsecond
    driver.request(1)
    driver.advance_to_deadline()  # client 2's quantum: it must make room for client 1
    assert drop_bytes(driver, 2) == out
    # Its time to move is still the grace plus the move at the assumed rate, not the grace alone.
    assert driver.policy.next_deadline() == pytest.approx(driver.now + 2.0 + out /
                                                          DEFAULT_TO_HOST_BPS)
    driver.advance(2.5)  # past the grace alone: client 2, still moving, keeps its lock
    assert revocations(driver, 2) == []
    assert driver.policy.links[0].to_host.measured is False


def test_a_client_claiming_impossible_moves_both_ways_leaves_the_idle_hint_as_it_was():
    driver = pair(tq=10)
    _, before = driver.hints[-1]  # since client 2 waits
    assert before.idle_release_ms > CONTENDED_IDLE_RELEASE_MS  # a swap: keep the lock through gaps
    driver.hints.clear()
    # Its memory back in a microsecond at its grant, and out in another at its drop.
    driver.moved(1, 16 * G, to_host=False, seconds=INSTANT)
    hand_over(driver, 1, seconds=INSTANT)
    driver.request(1)
    # Client 2 holds now, and the same swap stands between it and client 1: the same advice.
    assert driver.hints[-1] == (2, before)
    assert driver.policy.switch_seconds(0) > 1.0


def test_a_refused_move_is_logged_once_per_client():
    driver = pair(tq=10)
    hand_over(driver, 1, seconds=INSTANT)
    driver.request(1)
    driver.moved(2, 16 * G, to_host=False, seconds=1.0)  # honest: its memory back
    hand_over(driver, 2, seconds=3.0)
    driver.request(2)
    hand_over(driver, 1, seconds=INSTANT)  # refused again, not said again
    refusals = [log.text for log in driver.logs if "not counted" in log.text]
    assert len(refusals) == 1 and "client 1 " in refusals[0] and "64 GB/s" in refusals[0]


def test_moves_nobody_asked_for_teach_no_rate():
    driver = pair()
    driver.moved(1, 8 * G, seconds=1.0)  # a holder that moves on its own accord
    link = driver.policy.links[0]
    assert (link.to_host.bps, link.to_host.measured) == (DEFAULT_TO_HOST_BPS, False)
    assert link.moved_to_host.count == 1  # still shown among the moves


def test_only_the_bytes_asked_for_count_in_a_rate():
    driver = pair()
    driver.advance_to_deadline()
    out = drop_bytes(driver, 1)
    driver.moved(1, 12 * G, seconds=1.0)  # more than its drop asked: the rest is no measure
    assert driver.policy.links[0].to_host.bps == out
    driver.release(1)
    # Moves asked by EVICT count as well: client 2 lets go while idle, and makes room for 1.
    driver.request(1)
    driver.release(2, reason=p.ReleaseReason.IDLE)
    (evict,) = [m for m in driver.take_sent(2) if isinstance(m, p.Evict)]
    driver.moved(2, evict.bytes, seconds=0.5)
    assert driver.policy.links[0].to_host.bps == (out + evict.bytes / 0.5) / 2


def test_honest_fast_moves_are_learned_from_the_first_handoff():
    driver = pair(tq=10, grace=2.0)
    rates = [50e9, 40e9, 40e9]  # an H100's moves by copy, far above the defaults
    holder, waiter = 1, 2
    learned = []
    for rate in rates:
        driver.advance_to_deadline()
        out = drop_bytes(driver, holder)
        driver.moved(holder, out, seconds=out / rate)
        driver.release(holder)
        driver.moved(waiter, out, to_host=False, seconds=out / rate)  # back at the same speed
        driver.request(holder)
        link = driver.policy.links[0]
        learned.append((link.to_host.bps, link.to_device.bps))
        holder, waiter = waiter, holder
    # The first move replaces the default; each later one weighs half.
    assert learned == [(pytest.approx(50e9, rel=1e-4), pytest.approx(50e9, rel=1e-4)),
                       (pytest.approx(45e9, rel=1e-4), pytest.approx(45e9, rel=1e-4)),
                       (pytest.approx(42.5e9, rel=1e-4), pytest.approx(42.5e9, rel=1e-4))]
    # Deadlines follow: the next drop gives the grace plus the move at 45 GB/s.
    driver.advance_to_deadline()
    out = drop_bytes(driver, holder)
    assert driver.policy.next_deadline() == pytest.approx(driver.now + 2.0 + out /
                                                          learned[-1][0], rel=1e-4)
