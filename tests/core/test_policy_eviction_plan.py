"""residency.eviction_plan: who moves how much out of a device to make room, and gaps.py's rank
that orders the idle ones."""

import pytest

from gemshare_nvs.core.rules.gaps import STALE_GAPS, eviction_rank
from gemshare_nvs.core.rules.memory.residency import PAGE, eviction_plan, even_out

M = 1 << 20
G = 1 << 30
FRESH = (1, 0.0)  # an idle client in its usual pattern
STALE = (0, 0.0)  # one idle past it


def plan(needed, resident, waiting=(), rank=None, allocated=None):
    return eviction_plan(needed, resident, list(waiting), rank or {c: FRESH for c in resident},
                         allocated or resident)


def test_those_missing_least_give_first_down_to_the_others_level():
    # 1 has all of its 12 GiB there, 2 misses 4 of 12, 3 misses 6 of 12.
    resident, allocated = {1: 12 * G, 2: 8 * G, 3: 6 * G}, dict.fromkeys((1, 2, 3), 12 * G)
    assert dict(plan(4 * G, resident, allocated=allocated)) == {1: 4 * G}  # down to 2's level
    assert dict(plan(6 * G, resident, allocated=allocated)) == {1: 5 * G, 2: G}
    given = dict(plan(10 * G, resident, allocated=allocated))  # all three down to 6 2/3 missing
    assert sum(given.values()) == 10 * G
    assert [round(given[cid] / G, 2) for cid in (1, 2, 3)] == [6.67, 2.67, 0.67]


def test_programs_taking_turns_each_bring_back_the_same_part():
    """Four programs of 12 GiB in 31.5 GiB, running in turn: once settled, every turn brings
    back the same part, about a third of what does not fit (16.5 GiB), never a whole program."""
    size, capacity = 12 * G, 31 * G + G // 2
    resident = {cid: 0 for cid in range(4)}
    brought = []
    for turn in range(40):
        runner = turn % 4
        need = size - resident[runner]
        room = max(sum(resident.values()) + need - capacity, 0)
        others = {cid: r for cid, r in resident.items() if cid != runner and r}
        for cid, part in plan(room, others, allocated=dict.fromkeys(others, size)):
            resident[cid] -= part
        resident[runner] = size
        brought.append(need)
    settled = brought[8:]
    assert max(settled) - min(settled) <= 2 * PAGE
    assert max(settled) == pytest.approx((4 * size - capacity) / 3, abs=2 * PAGE)


def test_rounding_to_pages_is_made_up_by_the_first_in_order():
    given = dict(even_out(101 * M, [(1, 500 * M, 500 * M), (2, 500 * M, 500 * M)]))
    assert sum(given.values()) == 101 * M and given[2] % PAGE == 0
    assert given[1] >= given[2]


def test_the_stale_give_all_they_have_first_longest_idle_first():
    rank = {1: (0, 5.0), 2: (0, 2.0), 3: FRESH}
    given = plan(500 * M, {1: 300 * M, 2: 300 * M, 3: 900 * M}, rank=rank)
    assert given == [(2, 300 * M), (1, 200 * M)]


def test_waiters_give_last_from_the_back_of_the_queue():
    resident = {1: 100 * M, 2: 200 * M, 3: 200 * M}
    given = plan(400 * M, resident, waiting=[3, 4, 2], rank={1: FRESH})  # 4: none there
    assert given == [(1, 100 * M), (2, 200 * M), (3, 100 * M)]


def test_fewer_bytes_when_they_do_not_hold_enough():
    assert plan(900 * M, {1: 100 * M}) == [(1, 100 * M)]
    assert plan(0, {1: 100 * M}) == []


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
