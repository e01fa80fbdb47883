"""cost.py's arithmetic on its own: the room a grant needs, the rates learned from moves and how
far one move may pull them, and the idle time after which a holder should hand the lock on."""

import pytest

from gemshare_nvs.core.rules.cost import (
    CONTENDED_IDLE_RELEASE_MS,
    DEFAULT_TO_DEVICE_BPS,
    DEFAULT_TO_HOST_BPS,
    GB,
    LINK_CEILING_BPS,
    MIN_SAMPLE_BYTES,
    LINK_EFFICIENCY,
    Link,
    Rate,
    idle_release_ms,
    link_prior_bps,
    margin,
    room_to_make,
)

G = 1 << 30
M = 1 << 20


# ----- room ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("capacity", "expected"), [
    (80 * G, 1280 * M),  # 1/64 of the capacity
    (24 * G, 384 * M),
    (16 * G, 256 * M),  # where the two rules meet
    (8 * G, 256 * M),  # at least 256 MiB
    (64 * M, 256 * M),
])
def test_the_margin_is_a_64th_of_the_capacity_and_at_least_256_mib(capacity, expected):
    assert margin(capacity) == expected


def test_room_is_the_excess_plus_the_margin():
    # 16 GiB there, 16 GiB coming back, one reserve of 512 MiB: 8.5 GiB past 24 GiB.
    assert room_to_make(24 * G, 16 * G, 16 * G, 1, 512 * M) == 8 * G + 512 * M + 384 * M
    # A reserve per holder after the grant.
    assert room_to_make(24 * G, 16 * G, 16 * G, 2, 512 * M) == 9 * G + 384 * M
    # One byte over still asks for the whole margin.
    assert room_to_make(24 * G, 24 * G - 512 * M, 1, 1, 512 * M) == 1 + 384 * M


def test_nothing_moves_when_everything_fits():
    assert room_to_make(24 * G, 8 * G, 8 * G, 2, 512 * M) == 0
    assert room_to_make(24 * G, 16 * G, 7 * G + 512 * M, 1, 512 * M) == 0  # exactly full
    assert room_to_make(24 * G, 0, 0, 0, 512 * M) == 0


def test_nothing_moves_when_the_capacity_is_unknown():
    assert room_to_make(None, 64 * G, 64 * G, 2, 512 * M) == 0


# ----- rates --------------------------------------------------------------------------------

def test_the_first_move_replaces_the_default_and_later_ones_weigh_half():
    rate = Rate(DEFAULT_TO_HOST_BPS)
    assert rate.add(10 * G, 1.0) is True
    assert (rate.bps, rate.measured) == (10 * G, True)
    rate.add(10 * G, 2.0)
    assert rate.bps == (10 * G + 5 * G) / 2
    assert rate.seconds(3 * G) == 3 * G / rate.bps
    assert rate.seconds(0) == 0.0


def test_small_or_untimed_moves_say_nothing_about_the_link():
    rate = Rate(DEFAULT_TO_HOST_BPS)
    assert rate.add(MIN_SAMPLE_BYTES - 1, 0.001) is True
    assert rate.add(16 * G, 0.0) is True
    assert rate.add(16 * G, -1.0) is True
    assert (rate.bps, rate.measured) == (DEFAULT_TO_HOST_BPS, False)
    rate.add(MIN_SAMPLE_BYTES, 0.01)  # 6.7 GB/s, the smallest move that counts
    assert rate.bps == MIN_SAMPLE_BYTES / 0.01


def test_a_move_faster_than_any_host_link_is_refused():
    rate = Rate(DEFAULT_TO_HOST_BPS)
    assert rate.add(16 * G, 1e-6) is False
    assert (rate.bps, rate.measured) == (DEFAULT_TO_HOST_BPS, False)
    rate.add(10 * G, 1.0)
    assert rate.add(64 * G, 0.5) is False  # 137 GB/s
    assert rate.bps == 10 * G
    # At the ceiling itself a move still counts (as far as one step goes).
    assert rate.add(int(LINK_CEILING_BPS), 1.0) is True
    assert rate.bps == (10 * G + 4 * 10 * G) / 2


def test_after_the_first_move_one_move_pulls_a_rate_at_most_fourfold_either_way():
    up = Rate(DEFAULT_TO_HOST_BPS)
    up.add(10 * 10**9, 1.0)
    up.add(50 * 10**9, 1.0)  # counted as 40 GB/s, four times the 10 measured
    assert up.bps == (10e9 + 40e9) / 2
    down = Rate(DEFAULT_TO_HOST_BPS)
    down.add(10 * 10**9, 1.0)
    down.add(G, 3600.0)  # an hour for a GiB: counted as 2.5 GB/s
    assert down.bps == (10e9 + 2.5e9) / 2


def test_honest_rates_far_from_the_defaults_are_taken_from_the_first_move():
    out, back = Rate(DEFAULT_TO_HOST_BPS), Rate(DEFAULT_TO_DEVICE_BPS)
    seen = []
    for _ in range(2):
        out.add(50 * 10**9, 1.0)
        back.add(45 * 10**9, 1.0)
        seen.append((out.bps / GB, back.bps / GB))
    assert seen == [(50, 45), (50, 45)]
    slow = Rate(DEFAULT_TO_DEVICE_BPS)
    slow.add(G, 4.0)  # a link far slower than the default, too
    assert slow.bps == G / 4


def test_a_link_counts_only_the_bytes_it_is_told_to_and_tallies_every_move():
    link = Link()
    assert link.record(True, 16 * G, 1.0, counted=8 * G) is True
    assert link.to_host.bps == 8 * G  # 8 GiB in the second the 16 took: slower, never faster
    assert link.record(False, 12 * G, 1.0) is True  # all of it, by default
    assert link.to_device.bps == 12 * G
    assert link.record(True, 16 * G, 1e-6, counted=16 * G) is False
    assert link.to_host.bps == 8 * G
    link.record(True, M, 0.5, counted=0)  # nothing asked: no rate, still a move
    assert link.moves_view() == {
        "to_host": {"count": 3, "bytes": 32 * G + M, "seconds": 1.5},
        "to_device": {"count": 1, "bytes": 12 * G, "seconds": 1.0}}
    assert link.rates_view() == {"to_host_gbps": round(8 * G / 1e9, 2),
                                 "to_device_gbps": round(12 * G / 1e9, 2), "measured": True}


def test_an_unmeasured_link_shows_and_uses_the_defaults():
    link = Link()
    assert link.rates_view() == {"to_host_gbps": 3.0, "to_device_gbps": 10.0, "measured": False}
    # 3 GB out at 3 GB/s, and back at 10 GB/s.
    assert link.switch_seconds(3 * 10**9, 3 * 10**9) == pytest.approx(1.3)
    assert link.switch_seconds(0, 0) == 0.0


def test_an_unmeasured_link_with_a_prior_expects_switches_at_it_and_deadlines_at_the_defaults():
    link = Link(prior_bps=50e9)
    # The rates themselves are still the defaults, unmeasured (status shows the prior apart).
    assert link.rates_view() == {"to_host_gbps": 3.0, "to_device_gbps": 10.0, "measured": False}
    assert link.switch_seconds(10**10, 10**10) == pytest.approx(0.4)  # 10 GB each way at 50
    assert link.loan_seconds(10**10, 10**10) == pytest.approx(0.8)
    assert link.to_host.seconds(3 * 10**9) == pytest.approx(1.0)  # a deadline: 3 GB/s
    # Each direction leaves the prior once it has been measured: out at 10 GB/s, back at 50.
    link.record(True, 10**10, 1.0)
    assert link.switch_seconds(10**10, 10**10) == pytest.approx(1.0 + 0.2)


@pytest.mark.parametrize(("generation", "width", "expected_gbps"), [
    (5, 16, 63.008),  # H100 and H200: PCIe 5.0 x16
    (4, 16, 31.504),  # A100
    (3, 16, 15.76),
    (3, 8, 7.88),
    (2, 16, 8.0),  # 8b/10b coding
    (6, 16, 64.0),  # past the ceiling: the ceiling
])
def test_a_link_prior_is_what_its_pcie_link_carries_times_the_efficiency(
        generation, width, expected_gbps):
    assert link_prior_bps(generation, width) == pytest.approx(expected_gbps * GB *
                                                              LINK_EFFICIENCY)


@pytest.mark.parametrize(("generation", "width"), [(0, 16), (7, 16), (5, 0), (5, 33), (-1, -1)])
def test_no_link_prior_for_values_no_pcie_link_has(generation, width):
    assert link_prior_bps(generation, width) is None


# ----- idle release -------------------------------------------------------------------------

@pytest.mark.parametrize(("switch_s", "quantum_s", "expected"), [
    (0.2, 30, 400),  # twice the swap
    (1.0, 30, 2000),
    (0.05, 30, 250),  # no less than the client's own default
    (0.1, 30, 250),
    (20.0, 30, 30_000),  # past the quantum the drop comes anyway
    (20.0, 10, 10_000),
    (1.0, 0.1, 250),  # a quantum under the default: the default
])
def test_idle_release_is_twice_the_swap_capped_at_the_quantum(switch_s, quantum_s, expected):
    assert idle_release_ms(switch_s, quantum_s) == expected
    assert idle_release_ms(switch_s, quantum_s, contended=True) == expected


def test_a_cheap_switch_leaves_the_clients_own_setting_or_hurries_it_for_a_waiter():
    assert idle_release_ms(0.0, 30) == 0
    assert idle_release_ms(0.049, 30) == 0
    assert idle_release_ms(0.049, 30, contended=True) == CONTENDED_IDLE_RELEASE_MS == 100
