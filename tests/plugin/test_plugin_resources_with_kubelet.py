"""The three resources beside a fake kubelet that admits containers as the kubelet's device
manager does: each alone and together, in either order, with overcommit; what the merged answers
give a container; a request no one GPU can hold; a split; and placement across resources.

TWO_GPUS: GPU 0 (UUID_A) has 80 GiB, GPU 1 (UUID_B) 141 GiB; 1 GiB units unless a test says.
"""

from __future__ import annotations

import json
import os

import grpc
import pytest
from fake_kubelet import AdmissionFailed, FakeKubelet
from plugin_helpers import GIB, HOST_PATHS, TWO_GPUS, UUID_A, UUID_B

from gemshare_nvs.kubernetes.device_units import (
    COMPUTE,
    MEMORY,
    compute_unit_id,
    memory_unit_id,
    parse_unit_id,
)
from gemshare_plugin.allocation import (
    CONTAINER_LIBRARY,
    CONTAINER_SOCKET_DIR,
    SHARED_MEMORY_DIR,
    Paths,
)

SLOTS, MEMORY_NAME, COMPUTE_NAME = "gemshare.io/gpu", "gemshare.io/gpu-memory", \
    "gemshare.io/gpu-compute"
RESOURCES = (SLOTS, MEMORY_NAME, COMPUTE_NAME)
SOCKET_DIR = os.path.dirname(HOST_PATHS.scheduler_socket)


@pytest.fixture
def kubelet(kubelet_dir):
    made = FakeKubelet(str(kubelet_dir)).start()
    yield made
    made.stop(remove_sockets=False)


@pytest.fixture
def plugin(kubelet, kubelet_dir, plugin_factory):
    """Start the plugin (options as plugin_factory's) and wait until the kubelet has a list of
    each resource."""
    def start(**options):
        running = plugin_factory(kubelet_dir, **options)
        for name in RESOURCES:
            kubelet.wait_for_stream(resource=name).next()
        return running
    return start


def gpus_of(ids: list[str]) -> set[str]:
    return {ident.rpartition("::")[0] if parse_unit_id(ident) is None
            else parse_unit_id(ident).gpu_uuid for ident in ids}


def expected_envs(uuids: str) -> dict[str, str]:
    return {"LD_PRELOAD": CONTAINER_LIBRARY,
            "GEMSHARE_SOCKET": f"{CONTAINER_SOCKET_DIR}/scheduler.sock",
            "NVIDIA_VISIBLE_DEVICES": uuids}


EXPECTED_MOUNTS = {CONTAINER_LIBRARY: (HOST_PATHS.library, True),
                   CONTAINER_SOCKET_DIR: (SOCKET_DIR, True)}


def hold(kubelet: FakeKubelet, resource: str, ids: list[str]) -> None:
    """As though other containers held these units."""
    kubelet.allocated.setdefault(resource, set()).update(ids)


def memory_ids(uuid: str, indices) -> list[str]:
    return [memory_unit_id(uuid, 1024, index) for index in indices]


def compute_ids(uuid: str, indices) -> list[str]:
    return [compute_unit_id(uuid, index) for index in indices]


def test_memory_and_compute_are_advertised_per_gpu(kubelet, plugin):
    plugin()
    memory = kubelet.wait_for_stream(resource=MEMORY_NAME).latest
    compute = kubelet.wait_for_stream(resource=COMPUTE_NAME).latest
    assert sorted(memory) == sorted(memory_ids(UUID_A, range(80)) +
                                    memory_ids(UUID_B, range(141)))
    assert sorted(compute) == sorted(compute_ids(UUID_A, range(100)) +
                                     compute_ids(UUID_B, range(100)))
    for ident in memory:
        unit = parse_unit_id(ident)
        assert (unit.kind, unit.unit_bytes) == (MEMORY, 1 << 30)
    assert {parse_unit_id(ident).kind for ident in compute} == {COMPUTE}


@pytest.mark.parametrize("resource, count", [(SLOTS, 1), (MEMORY_NAME, 8), (COMPUTE_NAME, 30)])
def test_each_resource_alone_gives_the_library_the_socket_and_its_one_gpu(
        kubelet, plugin, resource, count):
    plugin()
    container = kubelet.admit({resource: count})
    (ids,) = container.devices.values()
    assert len(ids) == count
    (uuid,) = gpus_of(ids)
    assert container.envs == expected_envs(uuid)
    assert container.mounts == EXPECTED_MOUNTS
    assert container.conflicts == []


@pytest.mark.parametrize("order", [RESOURCES, RESOURCES[::-1], (MEMORY_NAME, COMPUTE_NAME),
                                   (COMPUTE_NAME, MEMORY_NAME), (COMPUTE_NAME, SLOTS)])
def test_resources_together_land_on_one_gpu_and_merge_without_conflict(kubelet, plugin, order):
    plugin()
    counts = {SLOTS: 1, MEMORY_NAME: 8, COMPUTE_NAME: 30}
    container = kubelet.admit({name: counts[name] for name in order})
    (uuid,) = gpus_of([ident for ids in container.devices.values() for ident in ids])
    assert container.conflicts == []  # the kubelet would log none
    assert container.envs == expected_envs(uuid)
    assert container.mounts == EXPECTED_MOUNTS


def test_with_mps_the_resources_together_give_each_mount_once(kubelet, plugin):
    pipe = "/run/gemshare-test/mps/pipe"
    plugin(paths=Paths(library=HOST_PATHS.library, scheduler_socket=HOST_PATHS.scheduler_socket,
                       mps_pipe_directory=pipe))
    container = kubelet.admit({MEMORY_NAME: 4, COMPUTE_NAME: 10, SLOTS: 1})
    assert container.conflicts == []
    assert container.mounts == {**EXPECTED_MOUNTS, pipe: (pipe, False),
                                SHARED_MEMORY_DIR: (SHARED_MEMORY_DIR, False)}


def test_a_later_resource_follows_the_gpu_of_the_containers_earlier_one(kubelet, plugin):
    plugin()
    # Other containers hold most of both GPUs' memory and 60 compute units of GPU 0.
    hold(kubelet, MEMORY_NAME, memory_ids(UUID_A, range(60)) + memory_ids(UUID_B, range(131)))
    hold(kubelet, COMPUTE_NAME, compute_ids(UUID_A, range(60)))
    # Memory first: GPU 1 has the fewer units free that hold it (10 against 20). Compute alone
    # would now go to GPU 0 (40 free against 100); it follows the memory to GPU 1.
    container = kubelet.admit({MEMORY_NAME: 5, COMPUTE_NAME: 30})
    assert gpus_of(container.devices[MEMORY_NAME]) == gpus_of(
        container.devices[COMPUTE_NAME]) == {UUID_B}
    assert container.conflicts == []
    # Compute first goes to its best fit, GPU 0, and the memory follows it there.
    kubelet.release(container)
    container = kubelet.admit({COMPUTE_NAME: 30, MEMORY_NAME: 5})
    assert gpus_of(container.devices[COMPUTE_NAME]) == gpus_of(
        container.devices[MEMORY_NAME]) == {UUID_A}


@pytest.fixture
def two_80_gib_gpus(monkeypatch, fake_nvml):
    monkeypatch.setenv("FAKE_NVML_GPUS", json.dumps(
        [{**gpu, "total": 80 * GIB} for gpu in TWO_GPUS]))


def memory_free_by_gpu(kubelet) -> dict[str, int]:
    advertised = kubelet.wait_for_stream(resource=MEMORY_NAME).latest
    taken = kubelet.allocated.get(MEMORY_NAME, set())
    free = {UUID_A: 0, UUID_B: 0}
    for ident in set(advertised) - taken:
        free[parse_unit_id(ident).gpu_uuid] += 1
    return free


def test_shares_are_packed_so_that_a_later_large_one_still_fits(kubelet, plugin,
                                                                two_80_gib_gpus):
    """On 2 × 80 GiB, 30, 30 and then 60 GiB: spread one a GPU, the 60 would find 50 on each."""
    plugin()
    first, second = kubelet.admit({MEMORY_NAME: 30}), kubelet.admit({MEMORY_NAME: 30})
    assert gpus_of(first.devices[MEMORY_NAME]) == gpus_of(second.devices[MEMORY_NAME])
    large = kubelet.admit({MEMORY_NAME: 60})
    assert gpus_of(large.devices[MEMORY_NAME]) != gpus_of(first.devices[MEMORY_NAME])
    assert sorted(memory_free_by_gpu(kubelet).values()) == [20, 20]


def test_after_8_45_and_45_gib_a_request_goes_where_it_fits_best(kubelet, plugin,
                                                                 two_80_gib_gpus):
    """62 GiB stay free, 27 and 35 on the two GPUs whichever way the three were placed: a 40 GiB
    request is refused saying so (the kube-scheduler, counting the node's total, let it come);
    20 GiB go to the 27, leaving the 35 whole for the 30 after them."""
    plugin()
    for size in (8, 45, 45):
        kubelet.admit({MEMORY_NAME: size})
    free = memory_free_by_gpu(kubelet)
    assert sorted(free.values()) == [27, 35]
    with pytest.raises(AdmissionFailed) as refused:
        kubelet.admit({MEMORY_NAME: 40})
    assert ("no GPU of this node has 40 memory units (40 GiB) free" in str(refused.value) and
            f"free now: GPU 0 ({UUID_A}): {free[UUID_A]} of 80; GPU 1 ({UUID_B}): "
            f"{free[UUID_B]} of 80" in str(refused.value)), refused.value
    tighter = min(free, key=free.get)
    assert gpus_of(kubelet.admit({MEMORY_NAME: 20}).devices[MEMORY_NAME]) == {tighter}
    roomier = max(free, key=free.get)
    assert gpus_of(kubelet.admit({MEMORY_NAME: 30}).devices[MEMORY_NAME]) == {roomier}


def test_a_container_whose_gpu_has_no_room_for_its_next_resource_gets_another_and_is_told(
        kubelet, plugin, caplog):
    caplog.set_level("INFO", logger="gemshare-device-plugin")
    plugin()
    hold(kubelet, COMPUTE_NAME, compute_ids(UUID_B, range(80)))
    container = kubelet.admit({MEMORY_NAME: 100, COMPUTE_NAME: 30})  # memory fits GPU 1 alone
    assert gpus_of(container.devices[MEMORY_NAME]) == {UUID_B}
    assert gpus_of(container.devices[COMPUTE_NAME]) == {UUID_A}
    # What the plugin cannot prevent: the kubelet keeps one of the two GPUs' variables.
    assert container.conflicts == [
        f"env NVIDIA_VISIBLE_DEVICES: {UUID_B!r} then {UUID_A!r}"]
    assert (f"gemshare.io/gpu-compute: 30 compute units on GPU 0 ({UUID_A}), while "
            f"gemshare.io/gpu-memory, allocated just before and most likely to the same "
            f"container, went to GPU 1 ({UUID_B})") in caplog.text


def test_memory_more_than_any_gpu_has_is_refused_with_the_reason(kubelet, plugin):
    plugin()
    with pytest.raises(AdmissionFailed) as refused:
        kubelet.admit({MEMORY_NAME: 150})
    assert str(refused.value) == (
        "Allocate failed due to device plugin GetPreferredAllocation rpc failed with err: rpc "
        "error: code = ResourceExhausted desc = gemshare.io/gpu-memory: 150 memory units "
        "(150 GiB) are more than one GPU of this node has (the largest has 141), and a "
        "container's memory units must all be on one GPU, which is unexpected")


def test_a_request_the_node_has_but_no_one_gpu_is_refused_saying_what_each_has(kubelet, plugin):
    plugin()
    hold(kubelet, MEMORY_NAME, memory_ids(UUID_A, range(60)) + memory_ids(UUID_B, range(121)))
    with pytest.raises(AdmissionFailed) as refused:
        kubelet.admit({COMPUTE_NAME: 10, MEMORY_NAME: 30})  # 40 free on the node, 20 on each
    assert (f"desc = gemshare.io/gpu-memory: no GPU of this node has 30 memory units (30 GiB) "
            f"free, and a container's memory units must all be on one GPU (the kube-scheduler "
            f"counts what the whole node has free); free now: GPU 0 ({UUID_A}): 20 of 80; "
            f"GPU 1 ({UUID_B}): 20 of 141, which is unexpected") in str(refused.value)
    assert kubelet.admit({MEMORY_NAME: 20}).conflicts == []  # and the plugin serves on


def test_compute_is_at_most_one_gpus_hundred(kubelet, plugin):
    plugin()
    with pytest.raises(AdmissionFailed, match="150 compute units are more than one GPU of this "
                                              r"node has \(the largest has 100\)"):
        kubelet.admit({COMPUTE_NAME: 150})


def test_memory_units_split_by_the_kubelet_say_how(kubelet, plugin, caplog):
    caplog.set_level("INFO", logger="gemshare-device-plugin")
    plugin()
    # A kubelet that did not take the preferred units (they were too few, or another allocator
    # chose) may hand out units of two GPUs.
    ids = memory_ids(UUID_A, range(2)) + memory_ids(UUID_B, range(3))
    (container,) = kubelet.client(MEMORY_NAME).allocate(ids).container_responses
    assert container.envs["NVIDIA_VISIBLE_DEVICES"] == f"{UUID_A},{UUID_B}"
    assert (f"gemshare.io/gpu-memory: allocated 5 memory units (5 GiB) split over 2 GPUs, 2 on "
            f"GPU 0 ({UUID_A}), 3 on GPU 1 ({UUID_B}); the container gets each GPU's part as a "
            f"budget on that GPU alone") in caplog.text


def test_slots_may_span_gpus_and_say_so_without_a_warning(kubelet, plugin, caplog):
    caplog.set_level("INFO", logger="gemshare-device-plugin")
    plugin()
    container = kubelet.admit({SLOTS: 4})  # 3 per GPU
    assert gpus_of(container.devices[SLOTS]) == {UUID_A, UUID_B}
    assert container.envs["NVIDIA_VISIBLE_DEVICES"] == f"{UUID_A},{UUID_B}"
    allocated = [record for record in caplog.records if "allocated 4 slots" in record.message]
    assert [record.levelname for record in allocated] == ["INFO"]


def test_overcommit_and_the_unit_size_set_how_many_units_a_gpu_has(kubelet, plugin):
    plugin(memory_unit=512 << 20, memory_overcommit=1.5)
    memory = kubelet.wait_for_stream(resource=MEMORY_NAME).latest
    per_gpu = {uuid: sum(1 for ident in memory if parse_unit_id(ident).gpu_uuid == uuid)
               for uuid in (UUID_A, UUID_B)}
    assert per_gpu == {UUID_A: 80 * 2 * 3 // 2, UUID_B: 141 * 2 * 3 // 2}
    assert {parse_unit_id(ident).unit_bytes for ident in memory} == {512 << 20}
    # 150 GiB: more than GPU 1's memory, less than its overcommitted units; GPU 0 has 120 GiB.
    container = kubelet.admit({MEMORY_NAME: 300})
    assert len(container.devices[MEMORY_NAME]) == 300
    assert gpus_of(container.devices[MEMORY_NAME]) == {UUID_B}


def test_units_of_another_resource_or_unit_size_are_refused(kubelet, plugin):
    plugin()
    for resource, ids in ((MEMORY_NAME, [memory_unit_id(UUID_A, 512, 0)]),
                          (MEMORY_NAME, [compute_unit_id(UUID_A, 0)]),
                          (COMPUTE_NAME, [f"{UUID_A}::0"]),
                          (SLOTS, [compute_unit_id(UUID_A, 0)])):
        with pytest.raises(grpc.RpcError) as refused:
            kubelet.client(resource).allocate(ids)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"unknown device IDs {ids[0]!r}: this plugin advertises {resource} as " in \
            refused.value.details()
