"""capacity.py on its own: which figure mode auto decides with, and the clients' reports."""

from policy_driver import Driver

from gemshare_nvs import protocol as p
from gemshare_nvs.core.rules.capacity import MAX_REPORTED_TOTAL, Capacity

G = 1 << 30


def test_nvml_wins_over_reports_and_the_limit_only_lowers_it():
    capacity = Capacity(nvml={0: 80 * G})
    capacity.report(1, 0, 40 * G)
    assert capacity.of(0) == (80 * G, "nvml")
    assert Capacity(nvml={0: 80 * G}, limit=60 * G).of(0) == (60 * G, "limit")
    assert Capacity(nvml={0: 80 * G}, limit=90 * G).of(0) == (80 * G, "nvml")


def test_without_nvml_the_largest_report_counts_and_the_limit_stands_in_for_none():
    capacity = Capacity()
    assert capacity.of(0) == (None, None)
    capacity.report(1, 0, 20 * G)
    capacity.report(2, 0, 30 * G)
    capacity.report(2, 1, 0)  # a report without a total says nothing
    assert capacity.of(0) == (30 * G, "reported") and capacity.reported(1) == 0
    assert Capacity(limit=6 * G).of(0) == (6 * G, "limit")


def test_reports_change_with_each_client_and_leave_with_it():
    capacity = Capacity()
    capacity.report(1, 0, 20 * G)
    capacity.report(2, 0, 30 * G)
    capacity.report(2, 0, 10 * G)  # a new report replaces the old
    assert capacity.reported(0) == 20 * G
    capacity.forget(1)
    assert capacity.reported(0) == 10 * G


def test_renumbering_moves_reports_to_their_new_index_and_drops_unknown_ones():
    capacity = Capacity()
    capacity.report(1, 0, 80 * G)
    capacity.report(1, 1, 40 * G)
    capacity.report(1, 2, 20 * G)
    capacity.renumber(1, {0: 3, 1: None})  # device 2 stays as it was
    assert [capacity.reported(d) for d in range(4)] == [0, 0, 20 * G, 80 * G]


def test_a_total_past_any_gpu_is_not_believed_and_warned_of_once_per_client():
    capacity = Capacity()
    assert capacity.report(1, 0, MAX_REPORTED_TOTAL) is None  # the bound itself is believed
    assert capacity.report(2, 0, 2**64 - 1) is not None
    assert capacity.report(2, 0, 2**64 - 1) is None  # said once
    assert capacity.of(0) == (MAX_REPORTED_TOTAL, "reported")
    capacity.forget(1)
    assert capacity.of(0) == (None, None)
    capacity.forget(2)
    assert capacity.report(2, 0, 2**64 - 1) is not None  # a new client of that id is told


def test_an_allocation_is_counted_at_most_at_what_the_gpu_holds():
    with_nvml = Driver(mode=p.Mode.AUTO, nvml={0: 80 * G})
    with_nvml.register(1)
    with_nvml.mem(1, 2**64 - 1, total=2**64 - 1)
    assert with_nvml.policy.clients[1].allocated == {0: 80 * G}
    assert with_nvml.policy.capacity.of(0) == (80 * G, "nvml")
    without = Driver(mode=p.Mode.AUTO)
    without.register(1)
    without.mem(1, 2**64 - 1, total=8 * G)
    assert without.policy.clients[1].allocated == {0: MAX_REPORTED_TOTAL}
