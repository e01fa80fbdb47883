"""Decayed usage (usage.py): what a meter reads, and when it reaches or falls to a level."""

import math

import pytest

from gemshare_nvs.core.rules.usage import HALF_LIFE_S, SATURATED_S, Meter, Usage


def test_a_second_held_counts_less_as_it_ages():
    meter = Meter()
    meter.start(0.0)
    meter.stop(1.0)
    assert meter.read(1.0) == pytest.approx(1.0, rel=0.02)
    assert meter.read(1.0 + HALF_LIFE_S) == pytest.approx(meter.read(1.0) / 2)
    assert meter.read(1.0 + 2 * HALF_LIFE_S) == pytest.approx(meter.read(1.0) / 4)


def test_holding_without_a_break_approaches_the_saturated_usage():
    meter = Meter()
    meter.start(0.0)
    assert meter.read(HALF_LIFE_S) == pytest.approx(SATURATED_S / 2)
    assert meter.read(20 * HALF_LIFE_S) == pytest.approx(SATURATED_S, rel=1e-5)


def test_reading_does_not_change_the_meter_and_folding_keeps_the_value():
    meter = Meter()
    meter.start(0.0)
    before = meter.read(12.0)
    assert meter.read(12.0) == before
    meter.advance(12.0)
    assert meter.read(12.0) == pytest.approx(before)
    assert meter.read(40.0) == pytest.approx(Meter(since=0.0).read(40.0))


def test_reaches_and_falls_to_say_when_a_level_is_crossed():
    meter = Meter()
    meter.start(0.0)
    at = meter.reaches(10.0, 0.0)
    assert meter.read(at) == pytest.approx(10.0)
    assert meter.reaches(5.0, at) == at  # already past it
    assert meter.reaches(SATURATED_S, at) == math.inf
    assert meter.falls_to(1.0, at) == math.inf  # it holds: it does not fall
    meter.stop(at)
    down = meter.falls_to(2.5, at)
    assert down == pytest.approx(at + 2 * HALF_LIFE_S)
    assert meter.read(down) == pytest.approx(2.5)
    assert meter.reaches(20.0, at) == math.inf  # it does not hold: it does not rise
    assert meter.falls_to(0.0, at) == math.inf


def test_usage_is_kept_per_client_and_device_and_forgotten_with_the_client():
    usage = Usage()
    usage.meter(1, 0).start(0.0)
    usage.meter(1, 1).start(5.0)
    usage.meter(2, 0).start(0.0)
    assert set(usage.of_client(1, 10.0)) == {0, 1}
    assert usage.read(1, 0, 10.0) > usage.read(1, 1, 10.0) > 0
    usage.forget(1)
    assert usage.of_client(1, 10.0) == {} and usage.read(1, 0, 10.0) == 0.0
    assert usage.read(2, 0, 10.0) > 0
