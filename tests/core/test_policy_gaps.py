"""Idle gaps lent (gap_rules.py): a holder whose gaps outlast what lending the device and taking it
back would move, or whose gaps were never seen, is hinted to let go soon; its early release lends
the device to the waiter, and when it asks again it gets the device back at once, for the rest
of its turn. Where the moves cost more than the gaps seen, the holder keeps its turn as before."""

import pytest
from policy_driver import Driver

from gemshare_nvs import protocol as p
from gemshare_nvs.core.rules.cost import (
    CONTENDED_IDLE_RELEASE_MS,
    DEFAULT_TO_DEVICE_BPS,
    DEFAULT_TO_HOST_BPS,
    Link,
    Rate,
    link_prior_bps,
    margin,
)
from gemshare_nvs.core.rules.gaps import idle_waited_s
from gemshare_nvs.observe.status import build_status

G = 1 << 30
M = 1 << 20
CAPACITY = 24 * G
RESERVE = 512 * M
# 16 + 16 GiB and one context reserve in 24 GiB: 8.5 GiB over, plus the margin.
ROOM = 8 * G + RESERVE + margin(CAPACITY)
TQ = 10
OUT_BPS, IN_BPS = 46e9, 43e9  # what an H200 measured
LOAN_S = 2 * ROOM / OUT_BPS + 2 * ROOM / IN_BPS  # 0.86 s


def link(out_bps: float = OUT_BPS, in_bps: float = IN_BPS) -> Link:
    return Link(Rate(out_bps, measured=True), Rate(in_bps, measured=True))


def busy(driver: Driver, cid: int, usage_s: float) -> None:
    """Give the client a usage, as if it had held the device that long: a waiter that never ran
    would be under its share and cut the holder's turn (share_rules.py), which is not tested
    here."""
    meter = driver.policy.usage.meter(cid, 0)
    meter.value, meter.at = usage_s, driver.now


def last_hint(driver: Driver, cid: int) -> int:
    return next((hint.idle_release_ms for c, hint in reversed(driver.hints) if c == cid), 0)


def see_gap(driver: Driver, cid: int, gap_s: float) -> None:
    """The holder `cid` lets go early, as libnvs does its hinted idle time after its work, and
    asks again `gap_s` after its work ended."""
    idle = idle_waited_s(last_hint(driver, cid))
    driver.advance(idle)  # idle while holding: the scheduler sees no more idleness than that
    driver.release(cid, reason=p.ReleaseReason.IDLE)
    driver.advance(gap_s - idle)
    driver.request(cid)


def pair(gap_s: float | None = 1.0, rates: Link | None = None, tq: int = TQ) -> Driver:
    """Clients 1 and 2 of 16 GiB on a 24 GiB device with the given link. Client 1 has shown gaps
    of `gap_s` (None: none) while it ran alone; then each ran. Now 1 holds and 2, as busy, waits:
    its grant would bring back the room it moved out for 1."""
    driver = Driver(tq=tq, limit=CAPACITY, answer_evictions=True)
    driver.policy.links[0] = rates or link()
    for cid in (1, 2):
        driver.register(cid)
    driver.mem(1, 16 * G, total=80 * G)
    driver.request(1)
    if gap_s is not None:
        see_gap(driver, 1, gap_s)
    driver.release(1)
    driver.mem(2, 16 * G, total=80 * G)
    for cid in (2, 1):  # each makes room for the other
        driver.request(cid)
        driver.release(cid)
    driver.request(1)
    busy(driver, 1, 5.0)
    busy(driver, 2, 5.0)
    driver.request(2)
    driver.take_sent()
    return driver


def status(driver: Driver) -> dict:
    return build_status(driver.policy, driver.now, 1_800_000_000.0, grace_ms=2000)


def logged(driver: Driver, start: str) -> list[str]:
    return [log.text for log in driver.logs if log.text.startswith(start)]


def test_gaps_are_learned_from_early_releases_and_shown():
    driver = pair(gap_s=None)
    assert status(driver)["clients"][0]["gaps_s"] == {}
    driver.advance(1.0)
    hint = last_hint(driver, 1)
    driver.release(1, reason=p.ReleaseReason.IDLE)  # 2 is granted
    driver.advance(0.6)
    driver.request(1)
    gaps = {client["id"]: client["gaps_s"] for client in status(driver)["clients"]}
    assert gaps == {1: {"0": pytest.approx(0.6 + hint / 1000, abs=0.001)}, 2: {}}


def test_a_holder_whose_gaps_outlast_the_loan_is_hinted_to_let_go_soon():
    driver = pair(gap_s=1.0)
    assert LOAN_S == pytest.approx(0.857, abs=0.002)
    assert last_hint(driver, 1) == CONTENDED_IDLE_RELEASE_MS
    device = status(driver)["devices"][0]
    assert device["loan_cost_s"] == pytest.approx(LOAN_S, abs=0.001)
    assert device["loan"] is None  # nothing lent yet


@pytest.mark.parametrize(("gap_s", "rates"), [
    (0.5, link()),  # 0.5 s gaps beside a 0.86 s loan
    (0.5, link(0.5e9, 0.5e9)),  # 0.5 s gaps beside 500 MB/s moves
])
def test_a_holder_keeps_its_turn_where_the_loan_costs_more_than_its_gap(gap_s, rates):
    driver = pair(gap_s=gap_s, rates=rates)
    switch_s = rates.switch_seconds(ROOM, ROOM)
    # Today's hint: keep the lock through gaps shorter than twice the switch.
    assert last_hint(driver, 1) == min(round(2 * switch_s * 1000), TQ * 1000)
    driver.advance(1.5)
    driver.release(1, reason=p.ReleaseReason.IDLE)  # a longer gap than usual: 2 goes on
    assert driver.holders() == [2]
    assert "idle gap" not in logged(driver, "grant client 2")[-1]
    driver.advance(1.0)
    driver.request(1)  # and 1 waits for its turn, as before
    assert driver.holders() == [2] and driver.waiters() == [1]
    assert not [m for m in driver.take_sent(2) if isinstance(m, p.DropLock)]


def test_a_holder_whose_gaps_were_never_seen_lends_the_first():
    """Nobody waits behind an idle holder for want of knowing its gaps: the first is lent, and
    what it lasted decides the next."""
    driver = pair(gap_s=None)
    assert last_hint(driver, 1) == CONTENDED_IDLE_RELEASE_MS
    driver.advance(0.3)
    driver.release(1, reason=p.ReleaseReason.IDLE, idle_us=100_000)
    assert "in the idle gap of client 1" in logged(driver, "grant client 2")[-1]
    driver.advance(0.1)
    driver.request(1)  # back 0.2 s after its work: shorter than the loan, which ends
    driver.moved(2, 0, to_host=False)
    assert [type(m) for m in driver.take_sent(2) if isinstance(m, p.DropLock)] == [p.DropLock]
    assert status(driver)["clients"][0]["gaps_s"] == {"0": pytest.approx(0.2)}


def lent(driver: Driver) -> float:
    """Client 1 lets go 100 ms into a gap and 2 is granted in it; when 1's turn ends."""
    until = driver.policy.devices[0].holders[1].quantum_end
    driver.advance(0.1)
    driver.release(1, reason=p.ReleaseReason.IDLE)
    return until


H200_PRIOR_BPS = link_prior_bps(5, 16)  # PCIe 5.0 x16: 47 GB/s expected each way


def test_before_any_move_a_gap_is_weighed_at_what_the_pcie_link_carries():
    # The low defaults (3 GB/s out, 10 in) put the loan at 8 s: nothing would be lent until a
    # turn's end had shown the link; at the PCIe 5.0 link's 47 GB/s it costs 0.8 s.
    assert 2 * ROOM / DEFAULT_TO_HOST_BPS + 2 * ROOM / DEFAULT_TO_DEVICE_BPS > 8
    driver = pair(gap_s=1.0, rates=Link(prior_bps=H200_PRIOR_BPS))
    assert last_hint(driver, 1) == CONTENDED_IDLE_RELEASE_MS
    assert status(driver)["devices"][0]["loan_cost_s"] == pytest.approx(
        4 * ROOM / H200_PRIOR_BPS, abs=0.001)
    lent(driver)
    assert "in the idle gap of client 1" in logged(driver, "grant client 2")[-1]


def test_without_a_prior_an_unmeasured_link_lends_nothing():
    driver = pair(gap_s=1.0, rates=Link())
    # The usual hint: twice the swap at the defaults.
    assert last_hint(driver, 1) == round(2 * Link().switch_seconds(ROOM, ROOM) * 1000)


def test_a_measured_rate_replaces_the_prior():
    slow = Link(prior_bps=H200_PRIOR_BPS)
    slow.record(True, ROOM, ROOM / 2e9)  # moves out at 2 GB/s: a loan costs 9.5 s
    driver = pair(gap_s=1.0, rates=slow)
    assert last_hint(driver, 1) != CONTENDED_IDLE_RELEASE_MS
    assert status(driver)["devices"][0]["loan_cost_s"] == pytest.approx(
        2 * ROOM / 2e9 + 2 * ROOM / H200_PRIOR_BPS, abs=0.001)


def test_one_long_gap_does_not_make_short_gaps_after_it_lendable():
    driver = pair(gap_s=2.0)  # as a program's first gap, at its start, may be
    see_gap(driver, 1, 0.2)  # then its own gaps: 0.2 s (2 got the first on loan, and drops)
    driver.release(2)
    assert driver.holders() == [1]
    driver.request(2)
    # The average, 1.1 s, outlasts the 0.86 s loan; the last gap does not: 1 keeps its turn.
    assert status(driver)["clients"][0]["gaps_s"]["0"] == pytest.approx(1.1, abs=0.01)
    assert last_hint(driver, 1) != CONTENDED_IDLE_RELEASE_MS
    driver.advance(1.0)
    driver.release(1, reason=p.ReleaseReason.IDLE)
    assert len(logged(driver, "lend client 1")) == 1  # the first gap's only
    assert "idle gap" not in logged(driver, "grant client 2")[-1]


def test_an_early_release_lends_the_gap_until_the_lenders_turn_ends():
    driver = pair()
    until = lent(driver)
    (lend,) = logged(driver, "lend client 1")
    assert "gaps last 1.000 s" in lend
    # 2's memory comes back beside what 1 moves out for it.
    assert logged(driver, "evict client 1")[-1].endswith(
        f"{ROOM // M} MiB to the host to make room for client 2 (pid 4002, proc)")
    assert "in the idle gap of client 1" in logged(driver, "grant client 2")[-1]
    assert driver.holders() == [2]
    assert driver.policy.devices[0].holders[2].turn_s == TQ  # a whole turn, unless 1 comes back
    # It fills a gap: it lets go soon after its own work, and its gaps are seen.
    assert last_hint(driver, 2) == CONTENDED_IDLE_RELEASE_MS
    device = status(driver)["devices"][0]
    assert device["loan"] == {"lender": 1, "left_s": pytest.approx(until - driver.now, abs=1e-3),
                              "borrowers": [2]}


def test_the_lender_back_gets_the_device_within_one_move():
    driver = pair()
    until = lent(driver)
    driver.take_sent()
    driver.advance(0.9)
    driver.request(1)  # its gap is over (or its gaps stopped): 2 drops at once
    assert driver.take_sent(2) == [p.DropLock(0, 0, ROOM)]
    assert driver.waiters() == [1]
    move_s = ROOM / OUT_BPS
    driver.advance(move_s)
    driver.moved(2, ROOM, seconds=move_s)
    driver.release(2)
    (granted,) = driver.take_sent(1)
    assert granted.flags & p.GRANT_OTHERS_RAN  # so it brings its memory back before it runs
    back = logged(driver, "grant client 1")[-1]
    assert "back from its idle gap" in back
    hold = driver.policy.devices[0].holders[1]
    assert hold.turn_s == pytest.approx(until - driver.now)  # the rest of its turn
    assert status(driver)["devices"][0]["last_drop"] == {"client": 2, "reason": "gap"}
    assert driver.policy.gap_rules.loans.get(0) is None


def test_who_gave_the_device_back_is_next_again():
    driver = pair()
    driver.register(3)
    driver.mem(3, 4 * G)
    busy(driver, 3, 5.0)
    lent(driver)
    driver.request(3)  # behind 2's loan
    driver.advance(0.9)
    driver.request(1)
    waits = status(driver)["devices"][0]["decisions"]["clients"]
    assert (waits["1"], waits["3"]) == (
        {"stage": "room", "decision": "waits: for room on the device"},  # the borrower's move
        {"stage": "gaps", "decision": "waits: behind a lender back from its gap"})
    driver.moved(2, ROOM)
    driver.release(2)
    assert driver.holders() == [1] and driver.waiters() == [3]
    driver.request(2)  # at once: it was dropped mid-work
    assert driver.waiters() == [2, 3]
    assert "2 waiting, first again: it gave the device back to the client whose gap it filled; " \
        "waits: " in logged(driver, "request client 2")[-1]


def test_a_loan_ends_with_the_lenders_turn():
    driver = pair()
    until = lent(driver)
    driver.take_sent()
    driver.now = until + 0.05  # 1 stayed away past the end of its turn, not of 2's
    busy(driver, 1, 20.0)  # not under its share: nothing else cuts 2's turn
    driver.request(1)
    assert driver.holders() == [2] and driver.waiters() == [1]
    assert not [m for m in driver.take_sent(2) if isinstance(m, p.DropLock)]
    assert status(driver)["devices"][0]["loan"] is None
    # 2 holds its own turn, from its grant.
    granted_at = driver.policy.devices[0].holders[2].granted_at
    driver.advance_to_deadline()
    assert driver.now == pytest.approx(granted_at + TQ)
    assert [type(m) for m in driver.take_sent(2)] == [p.DropLock]


def test_a_lender_that_leaves_ends_the_loan():
    driver = pair()
    lent(driver)
    driver.disconnect(1)
    assert driver.policy.gap_rules.loans.get(0) is None
    assert status(driver)["devices"][0]["loan"] is None


def test_gaps_that_get_shorter_than_the_loan_end_the_lending():
    driver = pair()
    lent(driver)
    driver.advance(0.2)
    driver.request(1)  # back after 0.3 s: its gaps are 0.65 s on average now
    driver.moved(2, ROOM)
    driver.release(2)
    driver.request(2)
    assert driver.holders() == [1]
    assert status(driver)["clients"][0]["gaps_s"] == {"0": pytest.approx(0.65)}
    assert last_hint(driver, 1) == round(2 * driver.policy.switch_seconds(0) * 1000) > 250


def test_a_borrower_that_lets_go_and_asks_again_still_borrows():
    driver = pair()
    lent(driver)
    driver.advance(0.3)
    driver.release(2, reason=p.ReleaseReason.IDLE)  # between two kernels; nobody waits
    assert status(driver)["devices"][0]["loan"]["lender"] == 1  # the loan outlives the gap
    driver.advance(0.05)
    driver.request(2)
    assert "in the idle gap of client 1" in logged(driver, "grant client 2")[-1]
    driver.take_sent()
    driver.advance(0.5)
    driver.request(1)
    assert [type(m) for m in driver.take_sent(2)] == [p.DropLock]
