"""gaps.py's arithmetic on its own: each client's idle gaps as a moving average, and whether a gap
is worth lending beside what the loan moves (cost.Link.loan_seconds)."""

import pytest

from gemshare_nvs.core.rules.cost import CHEAP_SWITCH_S, DEFAULT_IDLE_RELEASE_MS, Link, Rate
from gemshare_nvs.core.rules.gaps import MAX_GAP_S, Gaps, idle_waited_s, worth_lending

G = 1 << 30


def test_a_gap_runs_from_the_idle_time_before_the_release_to_the_next_request():
    gaps = Gaps()
    gaps.released_idle(1, 0, now=10.0, idle_s=0.1)
    assert gaps.expected(1, 0) is None  # not over yet
    assert gaps.requested(1, 0, now=10.9) == pytest.approx(1.0)
    assert gaps.expected(1, 0) == pytest.approx(1.0)
    assert gaps.expected(1, 1) is None and gaps.expected(2, 0) is None  # per client and device


def test_each_new_gap_weighs_half():
    gaps = Gaps()
    for released, requested in ((0.0, 1.0), (5.0, 5.5), (9.0, 9.25)):
        gaps.released_idle(1, 0, released, 0.0)
        gaps.requested(1, 0, requested)
    assert gaps.expected(1, 0) == pytest.approx(((1.0 + 0.5) / 2 + 0.25) / 2)


def gap_of(gaps: Gaps, seconds: float, at: float) -> None:
    gaps.released_idle(1, 0, at, 0.0)
    gaps.requested(1, 0, at + seconds)


def test_a_loan_is_weighed_against_the_median_of_the_last_three_gaps():
    gaps = Gaps()
    assert gaps.lendable(1, 0) is None
    gap_of(gaps, 1.5, 0.0)  # a start-up gap
    assert gaps.lendable(1, 0) == pytest.approx(1.5)
    gap_of(gaps, 0.2, 2.0)  # then the program's own short ones: the shorter of two
    assert gaps.expected(1, 0) == pytest.approx(0.85)
    assert gaps.lendable(1, 0) == pytest.approx(0.2)
    gap_of(gaps, 0.2, 3.0)
    assert gaps.lendable(1, 0) == pytest.approx(0.2)
    gaps.forget(1)
    assert gaps.lendable(1, 0) is None


def test_one_short_gap_among_long_ones_does_not_stop_the_loans():
    gaps = Gaps()
    for at, seconds in enumerate((1.9, 1.9, 0.6, 1.9)):  # a cell that ran late, once
        gap_of(gaps, seconds, 10.0 * at)
        if at >= 2:
            assert gaps.lendable(1, 0) == pytest.approx(1.9)


def test_only_a_request_after_an_early_release_ends_a_gap():
    gaps = Gaps()
    assert gaps.requested(1, 0, 3.0) is None  # asked after a drop, or for the first time
    gaps.released_idle(1, 0, 4.0, 0.25)
    gaps.requested(1, 0, 5.0)
    assert gaps.requested(1, 0, 9.0) is None
    assert gaps.expected(1, 0) == pytest.approx(1.25)


def test_a_very_long_gap_counts_as_the_longest_that_matters():
    gaps = Gaps()
    gaps.released_idle(1, 0, 0.0, 0.25)
    assert gaps.requested(1, 0, 3600.0) == MAX_GAP_S


def test_a_client_that_leaves_is_forgotten():
    gaps = Gaps()
    for cid in (1, 2):
        gaps.released_idle(cid, 0, 0.0, 0.1)
        gaps.requested(cid, 0, 1.0)
    gaps.released_idle(1, 0, 2.0, 0.1)
    gaps.forget(1)
    assert gaps.of_client(1) == {} and gaps.requested(1, 0, 3.0) is None
    assert gaps.of_client(2) == {0: pytest.approx(1.1)}


def test_the_idle_time_before_a_release_is_the_hint_or_libnvs_default():
    assert idle_waited_s(100) == 0.1
    assert idle_waited_s(860) == 0.86
    assert idle_waited_s(0) == DEFAULT_IDLE_RELEASE_MS / 1000


def test_a_loan_moves_the_room_out_and_in_twice_and_the_waiter_in():
    link = Link(Rate(46e9, True), Rate(43e9, True))
    room, fetch = 9 * G, 8 * G
    assert link.loan_seconds(room, fetch) == pytest.approx(
        2 * room / 46e9 + fetch / 43e9 + room / 43e9)


# Two programs of 16 GiB under a 24 GiB capacity: 8.875 GiB of room each way, at the 46 GB/s
# out and 43 GB/s in an H200 measured: 0.86 s for a loan and the way back.
H200_LOAN_S = Link(Rate(46e9, True), Rate(43e9, True)).loan_seconds(8.875 * G, 8.875 * G)


@pytest.mark.parametrize(("gap_s", "loan_s", "lends"), [
    (1.0, H200_LOAN_S, True),  # 1 s gaps: the gap outlasts the loan
    (0.5, H200_LOAN_S, False),  # 0.5 s gaps: it does not
    (0.2, H200_LOAN_S, False),
    # 0.5 s gaps beside 500 MB/s moves of 272 MiB (two 1.8 GiB programs on 4 GiB): 2.3 s
    (0.5, Link(Rate(0.5e9, True), Rate(0.5e9, True)).loan_seconds(272 << 20, 272 << 20), False),
    (None, H200_LOAN_S, True),  # never seen: lent, nobody waits behind an idle holder
    (1.0, CHEAP_SWITCH_S / 2, False),  # nothing much to move: the cheap hint does it
])
def test_a_gap_is_lent_when_it_outlasts_the_loan(gap_s, loan_s, lends):
    assert H200_LOAN_S == pytest.approx(0.857, abs=0.002)
    assert worth_lending(gap_s, loan_s) is lends
