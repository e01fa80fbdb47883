"""The three resources' units and IDs, the device lists, and the placement that keeps a
container's units on one GPU (without a kubelet: test_plugin_resources_with_kubelet.py has one).
"""

from __future__ import annotations

import pytest
from plugin_helpers import GIB

from gemshare_nvs.kubernetes.device_units import parse_unit_id
from gemshare_plugin import api
from gemshare_plugin.devices import MAX_DEVICES, DeviceList
from gemshare_plugin.gpu_health import Gpu
from gemshare_plugin.placement import NoRoom, Placement, preferred
from gemshare_plugin.resources import COMPUTE, MEMORY, SLOTS, family, size_words

A, B = "GPU-a", "GPU-b"
GPUS = [Gpu(0, A, True, 80 * GIB), Gpu(1, B, True, 141 * GIB)]
SLOT, MEM, CMP = family("gemshare.io/gpu", 3, GIB, 1.0)


def test_the_family_is_named_after_the_slots_resource():
    slots, memory, compute = family("example.com/shared-gpu", 4, 512 << 20, 2.0)
    assert [(r.kind, r.name) for r in (slots, memory, compute)] == [
        (SLOTS, "example.com/shared-gpu"), (MEMORY, "example.com/shared-gpu-memory"),
        (COMPUTE, "example.com/shared-gpu-compute")]
    assert not slots.one_gpu and memory.one_gpu and compute.one_gpu


@pytest.mark.parametrize("unit, overcommit, counts", [
    (GIB, 1.0, (80, 141)), (512 << 20, 1.0, (160, 282)), (GIB, 1.5, (120, 211)),
    (3 * GIB, 1.0, (26, 47)), (256 * GIB, 1.0, (0, 0))])
def test_memory_units_are_what_each_gpu_holds_times_the_overcommit(unit, overcommit, counts):
    memory = family("gemshare.io/gpu", 3, unit, overcommit)[1]
    assert tuple(memory.count(gpu) for gpu in GPUS) == counts


def test_slots_and_compute_are_the_same_on_every_gpu():
    assert [SLOT.count(gpu) for gpu in GPUS] == [3, 3]
    assert [CMP.count(gpu) for gpu in GPUS] == [100, 100]


def test_each_resource_reads_back_only_its_own_ids():
    memory_id, compute_id, slot = MEM.ids(GPUS[0])[7], CMP.ids(GPUS[1])[99], SLOT.ids(GPUS[0])[2]
    assert (memory_id, compute_id, slot) == ("GPU-a::m1024::7", "GPU-b::c::99", "GPU-a::2")
    assert MEM.parse(memory_id) == (A, 7) and CMP.parse(compute_id) == (B, 99)
    assert SLOT.parse(slot) == (A, 2)
    assert MEM.parse(compute_id) is None and CMP.parse(memory_id) is None
    assert MEM.parse(slot) is None and CMP.parse(slot) is None
    other_size = family("gemshare.io/gpu", 3, 2 * GIB, 1.0)[1]
    assert other_size.parse(memory_id) is None  # advertised with another --memory-unit
    assert parse_unit_id(memory_id).unit_bytes == GIB  # what the scheduler reads back


def test_amounts_and_sizes_in_words():
    assert MEM.amount(8) == "8 memory units (8 GiB)"
    assert family("g.io/gpu", 1, 512 << 20, 1.0)[1].amount(3) == "3 memory units (1536 MiB)"
    assert CMP.amount(1) == "1 compute unit" and SLOT.amount(2) == "2 slots"
    assert size_words(1 << 40) == "1 TiB" and size_words(64 << 20) == "64 MiB"


def test_a_device_list_advertises_each_gpus_units_with_its_health():
    devices = DeviceList(MEM)
    assert devices.update([GPUS[0], Gpu(1, B, False, 141 * GIB)])
    _, listed = devices.snapshot()
    assert len(listed) == 80 + 141
    assert {d.health for d in listed if d.ID.startswith(B)} == {"Unhealthy"}
    assert devices.counts() == {A: 80, B: 141} and devices.indices() == {A: 0, B: 1}
    assert not devices.update([GPUS[0], Gpu(1, B, False, 141 * GIB)])  # nothing changed
    assert devices.named(B) == f"GPU 1 ({B})" and devices.named("GPU-z") == "GPU-z"


def test_units_too_many_for_the_kubelets_list_are_not_advertised(caplog):
    many = family("gemshare.io/gpu", 3, 64 << 20, 10.0)[1]  # 12,800 and 22,560 units a GPU
    devices = DeviceList(many)
    devices.update(GPUS + [Gpu(2, "GPU-c", True, 80 * GIB)])
    assert devices.snapshot()[1] == [] and devices.counts() == {}
    assert f"more than the {MAX_DEVICES:,} the kubelet takes in one list" in caplog.text
    assert "give a larger --memory-unit" in caplog.text
    devices.update(GPUS + [Gpu(2, "GPU-c", True, 80 * GIB)])
    assert caplog.text.count("none advertised") == 1


def test_a_list_at_the_cap_fits_what_the_kubelet_reads():
    longest = "GPU-" + "f" * 50 + "::c::99"  # 63 characters, the most the kubelet takes
    listed = api.ListAndWatchResponse(devices=[api.Device(ID=longest, health=api.UNHEALTHY)
                                               for _ in range(MAX_DEVICES)])
    assert listed.ByteSize() < 4 << 20  # gRPC's default limit, which the kubelet keeps


def test_a_uuid_too_long_for_an_id_leaves_that_gpu_out(caplog):
    long_uuid = "GPU-" + "x" * 55  # its slot IDs fit in 63 characters, its memory IDs do not
    gpus = [GPUS[0], Gpu(1, long_uuid, True, 141 * GIB)]
    slots, memory = DeviceList(SLOT), DeviceList(MEM)
    slots.update(gpus)
    memory.update(gpus)
    assert slots.indices() == {A: 0, long_uuid: 1} and memory.indices() == {A: 0}
    assert "has a UUID too long for a device ID; its gemshare.io/gpu-memory" in caplog.text


def ids_on(resource, uuid: str, indices) -> list[str]:
    return [resource.device_id(uuid, index) for index in indices]


def test_memory_and_compute_come_from_one_gpu_or_none():
    available = ids_on(MEM, A, range(5)) + ids_on(MEM, B, range(4))
    assert preferred(MEM, available, [], 5) == ids_on(MEM, A, range(5))
    assert preferred(MEM, available, [], 6) is None  # nine free, but no GPU has six
    assert preferred(SLOT, ids_on(SLOT, A, range(3)) + ids_on(SLOT, B, range(2)), [], 4) == \
        ids_on(SLOT, A, range(3)) + ids_on(SLOT, B, range(1))  # slots may spill


def test_units_a_container_must_keep_are_filled_up_on_their_gpu_then_elsewhere():
    available = ids_on(MEM, A, range(4)) + ids_on(MEM, B, range(10))
    kept = ids_on(MEM, A, [0])
    assert preferred(MEM, available, kept, 4) == kept + ids_on(MEM, A, range(1, 4))
    # Its GPU has no room for the rest: the kubelet still gets the units it must keep.
    assert preferred(MEM, available, kept, 6) == kept + ids_on(MEM, A, range(1, 4)) + \
        ids_on(MEM, B, range(2))


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def placement():
    lists = {resource.name: DeviceList(resource) for resource in (SLOT, MEM, CMP)}
    for devices in lists.values():
        devices.update(GPUS)
    clock = Clock()
    made = Placement(lists, clock=clock)
    made.clock = clock
    return made


def steered(placement) -> list[str]:
    """Memory on GPU 1 (the fewer free units that hold it), then compute, which by its own free
    units would go to GPU 0."""
    memory = placement.prefer(MEM, ids_on(MEM, A, range(20)) + ids_on(MEM, B, range(10)), [], 5)
    assert memory == ids_on(MEM, B, range(5))
    placement.allocated(MEM, memory)
    return placement.prefer(CMP, ids_on(CMP, A, range(40)) + ids_on(CMP, B, range(100)), [], 30)


def test_a_containers_next_resource_follows_the_gpu_of_its_first(placement):
    assert steered(placement) == ids_on(CMP, B, range(30))


def test_a_call_after_the_window_is_another_containers(placement):
    memory = placement.prefer(MEM, ids_on(MEM, A, range(20)) + ids_on(MEM, B, range(10)), [], 5)
    placement.allocated(MEM, memory)
    placement.clock.now += 2.5
    assert placement.prefer(CMP, ids_on(CMP, A, range(40)) + ids_on(CMP, B, range(100)), [],
                            30) == ids_on(CMP, A, range(30))


def test_a_resource_the_container_had_starts_the_next_container(placement):
    placement.allocated(CMP, steered(placement))  # the first container: all on GPU 1
    # The next container's first call is for memory again: it follows nothing, and takes the
    # best fit, GPU 0.
    assert placement.prefer(MEM, ids_on(MEM, A, range(10)) + ids_on(MEM, B, range(15)), [],
                            5) == ids_on(MEM, A, range(5))


@pytest.mark.parametrize("resource", [MEM, CMP])
def test_memory_and_compute_go_to_the_gpu_with_the_fewest_free_that_holds_them(
        placement, resource):
    # GPU 1 has fewer free (12) than GPU 0 (50), and enough for 8: the best fit.
    available = ids_on(resource, A, range(50)) + ids_on(resource, B, range(12))
    assert placement.prefer(resource, available, [], 8) == ids_on(resource, B, range(8))
    placement.clock.now += 5  # a new container
    # 20 do not fit GPU 1's 12: GPU 0 it is.
    assert placement.prefer(resource, available, [], 20) == ids_on(resource, A, range(20))
    placement.clock.now += 5
    # Where both have as few free, the first offered.
    assert placement.prefer(resource, ids_on(resource, B, range(9)) +
                            ids_on(resource, A, range(9)), [], 9) == ids_on(resource, B, range(9))


def test_a_gpu_with_another_resource_all_taken_is_the_last_fit(placement):
    # GPU 0's compute is all taken (the last compute call was offered none of it): a container
    # asking for memory and compute could not have both there.
    placement.prefer(CMP, ids_on(CMP, B, range(100)), [], 5)
    placement.clock.now += 5
    assert placement.prefer(MEM, ids_on(MEM, A, range(10)) + ids_on(MEM, B, range(50)), [],
                            5) == ids_on(MEM, B, range(5))
    placement.clock.now += 5
    # Where only it holds the request, there it goes.
    assert placement.prefer(MEM, ids_on(MEM, A, range(60)) + ids_on(MEM, B, range(50)), [],
                            55) == ids_on(MEM, A, range(55))


def test_slots_with_no_container_to_follow_go_to_the_gpu_with_most_room_in_everything(
        placement):
    # GPU 0 has nearly all its compute taken (seen by the last compute call), GPU 1 its memory
    # partly: GPU 1 has the more room, though GPU 0 has more slots free.
    placement.prefer(CMP, ids_on(CMP, A, range(10)) + ids_on(CMP, B, range(100)), [], 5)
    placement.clock.now += 5
    placement.prefer(MEM, ids_on(MEM, A, range(80)) + ids_on(MEM, B, range(50)), [], 8)
    placement.clock.now += 5
    assert placement.prefer(SLOT, ids_on(SLOT, A, range(3)) + ids_on(SLOT, B, range(2)), [],
                            1) == ids_on(SLOT, B, range(1))


def test_a_refusal_says_what_each_gpu_has_free(placement):
    with pytest.raises(NoRoom) as refused:
        placement.prefer(CMP, ids_on(CMP, A, range(20)) + ids_on(CMP, B, range(25)), [], 30)
    assert str(refused.value) == (
        "gemshare.io/gpu-compute: no GPU of this node has 30 compute units free, and a "
        "container's compute units must all be on one GPU (the kube-scheduler counts what the "
        f"whole node has free); free now: GPU 0 ({A}): 20 of 100; GPU 1 ({B}): 25 of 100")
    with pytest.raises(NoRoom, match=r"200 memory units \(200 GiB\) are more than one GPU of "
                                     r"this node has \(the largest has 141\)"):
        placement.prefer(MEM, ids_on(MEM, A, range(80)) + ids_on(MEM, B, range(141)), [], 200)
