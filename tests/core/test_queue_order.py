"""A device's queue is worked out from facts (model/state.py's Queue): arrival, and for each
waiter placed by a stage the waiters it went ahead of. Leaving changes no one else's order, and
the order is the one that moving each placed waiter in place, when it asked, would give."""

from hypothesis import given
from hypothesis import strategies as st

from gemshare_nvs.core.model.state import Queue, Wait


def queue_of(*cids: int) -> Queue:
    queue = Queue()
    for cid in cids:
        queue[cid] = Wait(0.0, queued=True)
    return queue


def test_waiters_stand_in_order_of_arrival():
    assert list(queue_of(3, 1, 2)) == [3, 1, 2]


def test_one_that_went_ahead_stands_before_the_first_of_those_it_passed():
    queue = queue_of(1, 2, 3, 4)
    queue.go_ahead(4, {2, 3})
    assert list(queue) == [1, 4, 2, 3]
    queue[5] = Wait(0.0, queued=True)  # a later one stands behind them all
    assert list(queue) == [1, 4, 2, 3, 5]
    del queue[2]  # the one it passed first is granted: it stays ahead of the other
    assert list(queue) == [1, 4, 3, 5]
    del queue[3]  # none of those it passed is left: it keeps its place among the rest
    assert list(queue) == [1, 4, 5]
    assert list(reversed(queue)) == [5, 4, 1] and next(iter(queue)) == 1


def test_a_waiter_sent_to_the_front_passes_everyone():
    queue = queue_of(1, 2, 3)
    queue.go_ahead(3, [1, 2])
    assert list(queue) == [3, 1, 2]
    assert 3 in queue and len(queue) == 3 and queue.pop(1).queued


# One step: a waiter asks (and goes ahead of the last `k` waiters, k may be 0), or one leaves.
STEPS = st.lists(st.one_of(st.tuples(st.just("ask"), st.integers(0, 5)),
                           st.tuples(st.just("leave"), st.integers(0, 9))), max_size=40)


@given(STEPS)
def test_the_order_is_what_moving_in_place_would_give(steps):
    """The stages place a waiter only as it asks, ahead of a run of waiters at the back (a
    claim passes those from the back, a lender goes ahead of everyone or of those behind the
    lender it gave way to); the queue must stand as if it had been moved there in place."""
    queue, in_place, next_cid = Queue(), [], 1
    for kind, number in steps:
        if kind == "ask":
            cid, next_cid = next_cid, next_cid + 1
            queue[cid] = Wait(0.0, queued=True)
            passed = in_place[len(in_place) - number:] if number else []
            if passed:
                queue.go_ahead(cid, passed)
                in_place.insert(len(in_place) - len(passed), cid)
            else:
                in_place.append(cid)
        elif in_place:
            cid = in_place.pop(number % len(in_place))
            del queue[cid]
        assert list(queue) == in_place
