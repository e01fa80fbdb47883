"""device_identity.py on its own: one client's numbering beside the scheduler's, and the
scheduler's index for each GPU."""

from gemshare_nvs.core.model.device_identity import (
    MAX_DEVICES,
    MAX_DEVICES_PER_CLIENT,
    GpuIndices,
    Numbering,
)

A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"


def test_until_renumbered_the_clients_numbering_is_the_schedulers():
    numbering = Numbering.registered(2)
    assert (numbering.scheduler_device(2), numbering.scheduler_device(5)) == (2, 5)
    assert (numbering.own_ordinal(2), numbering.own_ordinal(5)) == (2, 5)


def test_once_renumbered_only_devices_with_a_uuid_are_known():
    numbering = Numbering.registered(0)
    assert numbering.learn(0, A, 3) == {0: 3}  # its device 0 is the scheduler's 3
    assert (numbering.device, numbering.gpu_uuid) == (3, A)
    assert numbering.scheduler_device(0) == 3
    assert numbering.scheduler_device(1) is None
    assert (numbering.own_ordinal(3), numbering.own_ordinal(7)) == (0, 7)
    assert numbering.learn(1, B, 0) == {}  # its device 1 is the scheduler's 0
    assert (numbering.scheduler_device(1), numbering.own_ordinal(0)) == (0, 1)


def test_a_uuid_that_renumbers_the_client_leaves_its_unknown_devices_behind():
    numbering = Numbering.registered(0)
    numbering.may_name(1)
    numbering.may_name(2)
    assert numbering.learn(2, B, 2) == {}  # the same number: nothing moves
    assert numbering.learn(0, A, 5) == {0: 5, 1: None}


def test_each_device_takes_its_first_uuid_only():
    numbering = Numbering.registered(1)
    assert numbering.takes_uuid(0, A)  # another of its devices: welcome too
    assert not numbering.takes_uuid(1, "")
    assert numbering.takes_uuid(1, A)
    numbering.learn(1, A, 1)
    assert not numbering.takes_uuid(1, B)


def test_a_client_may_name_a_bounded_number_of_devices_counting_its_registered_one():
    numbering = Numbering.registered(0)
    assert all(numbering.may_name(d) for d in range(MAX_DEVICES_PER_CLIENT))
    assert not numbering.may_name(MAX_DEVICES_PER_CLIENT)
    assert numbering.may_name(3)  # named before: still fine


def test_nvml_numbers_the_gpus_it_knows_and_the_others_get_an_index_that_stays():
    indices = GpuIndices({A: 0})
    assert indices.index_of(A, 4) == 0
    assert indices.index_of(B, 0) == 1  # its ordinal is NVML's GPU 0: the lowest free index
    assert indices.index_of(B, 5) == 1
    assert indices.index_of("", 6) == 6  # no UUID: the ordinal as it is
    assert indices.given == {B: 1}


def test_an_unknown_gpu_keeps_the_clients_ordinal_when_it_is_free():
    assert GpuIndices().index_of(B, 3) == 3


def test_when_every_index_is_given_a_new_gpu_gets_the_ordinal_and_is_not_remembered():
    indices = GpuIndices()
    for i in range(MAX_DEVICES):
        indices.index_of(f"GPU-{i}", i)
    assert indices.index_of("GPU-new", 2) == 2 and "GPU-new" not in indices.given


def test_the_registered_device_keeps_its_number_until_its_own_uuid_comes():
    numbering = Numbering.registered(0)
    numbering.learn(1, B, 5)
    assert (numbering.scheduler_device(0), numbering.scheduler_device(2)) == (0, None)
