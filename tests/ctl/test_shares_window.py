"""Shares of GPU time from successive polls of each client's running hold time."""

from __future__ import annotations

import pytest

from gemshare_ctl.shares_window import ShareWindow, hold_times


def test_warming_up_until_two_polls():
    window = ShareWindow()
    assert window.shares() == {}
    window.add(100.0, {1: 5.0})
    assert window.shares() == {1: None}
    assert window.span_s() == 0.0
    window.add(101.0, {1: 6.0})
    assert window.shares() == {1: pytest.approx(1.0)}
    assert window.span_s() == pytest.approx(1.0)


def test_share_is_hold_time_grown_over_wall_time():
    window = ShareWindow()
    window.add(0.0, {1: 0.0, 2: 10.0})
    window.add(4.0, {1: 1.0, 2: 13.0})
    assert window.share(1) == pytest.approx(0.25)
    assert window.share(2) == pytest.approx(0.75)


def test_a_waiter_that_never_holds_has_zero():
    window = ShareWindow()
    window.add(0.0, {7: 2.5})
    window.add(2.0, {7: 2.5})
    assert window.share(7) == 0.0


def test_only_the_last_minute_counts():
    window = ShareWindow(window_s=60.0)
    # Held the whole first minute, then nothing for a minute: the old burst is forgotten.
    for second in range(0, 121):
        window.add(float(second), {1: float(min(second, 60))})
    assert window.share(1) == pytest.approx(0.0)
    assert window.span_s() == pytest.approx(60.0)


def test_share_over_a_window_partly_filled():
    window = ShareWindow(window_s=60.0)
    for second in range(0, 91):
        window.add(float(second), {1: float(max(0, second - 60))})  # holds from second 60 on
    assert window.share(1) == pytest.approx(0.5)


def test_a_client_that_arrives_late_is_measured_from_its_first_poll():
    window = ShareWindow()
    window.add(0.0, {1: 0.0})
    window.add(10.0, {1: 10.0, 2: 0.0})
    assert window.share(2) is None
    window.add(12.0, {1: 10.0, 2: 2.0})
    assert window.share(2) == pytest.approx(1.0)
    assert window.share(1) == pytest.approx(10.0 / 12.0)


def test_a_client_gone_from_the_newest_poll_has_no_share():
    window = ShareWindow()
    window.add(0.0, {1: 0.0, 2: 0.0})
    window.add(1.0, {1: 1.0})
    assert window.shares() == {1: pytest.approx(1.0)}
    assert window.share(2) is None


def test_poll_jitter_never_gives_more_than_all_or_less_than_none():
    window = ShareWindow()
    window.add(0.0, {1: 0.0, 2: 5.0})
    window.add(1.0, {1: 1.004, 2: 4.9})
    assert window.share(1) == 1.0
    assert window.share(2) == 0.0


def test_polls_must_move_forward():
    window = ShareWindow()
    window.add(5.0, {})
    with pytest.raises(ValueError, match="time order"):
        window.add(5.0, {})
    with pytest.raises(ValueError, match="longer than 0"):
        ShareWindow(window_s=0)


def test_hold_times_reads_what_the_status_has():
    status = {"clients": [{"id": 1, "hold_time_s": 2.5}, {"id": 2}, "junk",
                          {"id": 3, "hold_time_s": True}, {"id": 4, "hold_time_s": 0}]}
    assert hold_times(status) == {1: 2.5, 4: 0.0}
    assert hold_times({}) == {}
