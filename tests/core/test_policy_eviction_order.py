"""residency.eviction_order: who is asked first to move memory out of a device."""

from gemshare_nvs.core.rules.residency import eviction_order


def test_clients_not_waiting_go_first_then_the_queue_from_its_back_largest_first_within():
    resident = {1: 5, 2: 9, 3: 4, 4: 7, 5: 1}
    assert eviction_order(resident, waiting=[3, 5]) == [(2, 9), (4, 7), (1, 5), (5, 1), (3, 4)]


def test_with_nobody_waiting_the_largest_go_first():
    assert eviction_order({1: 2, 2: 8, 3: 8}, waiting=[]) == [(2, 8), (3, 8), (1, 2)]
