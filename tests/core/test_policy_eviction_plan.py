"""residency.eviction_plan: who moves how much out of a device to make room, and gaps.py's rank
that orders the idle ones."""

import pytest

from gemshare_nvs.core.rules.gaps import STALE_GAPS, eviction_rank
from gemshare_nvs.core.rules.residency import PAGE, eviction_plan, spread

M = 1 << 20
FRESH = (1, 0.0)  # an idle client in its usual pattern
STALE = (0, 0.0)  # one idle past it


def test_room_is_spread_over_the_idle_in_proportion_to_what_each_has_there():
    plan = eviction_plan(300 * M, {1: 600 * M, 2: 300 * M}, waiting=[],
                         rank={1: FRESH, 2: FRESH})
    assert dict(plan) == {1: 200 * M, 2: 100 * M}


def test_rounding_to_pages_is_made_up_by_the_first_in_order():
    plan = dict(spread(101 * M, [(1, 500 * M), (2, 500 * M)]))
    assert sum(plan.values()) == 101 * M and plan[2] % PAGE == 0
    assert plan[1] >= plan[2]


def test_the_stale_give_all_they_have_first_longest_idle_first():
    rank = {1: (0, 5.0), 2: (0, 2.0), 3: FRESH}
    plan = eviction_plan(500 * M, {1: 300 * M, 2: 300 * M, 3: 900 * M}, waiting=[], rank=rank)
    assert plan == [(2, 300 * M), (1, 200 * M)]


def test_waiters_give_last_from_the_back_of_the_queue():
    resident = {1: 100 * M, 2: 200 * M, 3: 200 * M}
    plan = eviction_plan(400 * M, resident, waiting=[3, 4, 2], rank={1: FRESH})  # 4: none there
    assert plan == [(1, 100 * M), (2, 200 * M), (3, 100 * M)]


def test_fewer_bytes_when_they_do_not_hold_enough():
    assert eviction_plan(900 * M, {1: 100 * M}, waiting=[], rank={1: FRESH}) == [(1, 100 * M)]
    assert eviction_plan(0, {1: 100 * M}, waiting=[], rank={1: FRESH}) == []


@pytest.mark.parametrize(("since", "usual", "stale"), [
    (None, 2.0, True),  # never held: nothing says it is coming
    (9.0, None, True),  # no pattern seen
    (10.0 - 2.0 * STALE_GAPS - 0.1, 2.0, True),  # idle past its pattern: its user went away
    (8.0, 2.0, False),
])
def test_a_client_is_stale_when_idle_past_its_pattern_or_of_none(since, usual, stale):
    assert (eviction_rank(10.0, since, usual)[0] == 0) is stale


def test_among_fresh_ones_the_one_expected_back_last_ranks_first():
    # idle since 9 with 3 s gaps is back at 12; idle since 8 with 2 s gaps at 10
    assert eviction_rank(10.0, 9.0, 3.0) < eviction_rank(10.0, 8.0, 2.0)
