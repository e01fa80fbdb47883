"""Slot IDs, the preferred allocation, and what a container is given for its slots."""

from __future__ import annotations

import pytest

from gemshare_plugin.allocation import (
    CONTAINER_LIBRARY,
    CONTAINER_SOCKET_DIR,
    SHARED_MEMORY_DIR,
    Paths,
    UnknownDevices,
    container_response,
    units_by_gpu,
)
from gemshare_plugin.placement import preferred as placed
from gemshare_plugin.resources import SLOTS, Resource
from gemshare_plugin.slots import parse_slot_id, slot_id, slot_ids

A, B, C = "GPU-a", "GPU-b", "GPU-c"
SLOT_RESOURCE = Resource(SLOTS, "gemshare.io/gpu", slots=4)


def preferred(available: list[str], must_include: list[str], size: int) -> list[str]:
    return placed(SLOT_RESOURCE, available, must_include, size)


def test_ids_name_the_gpu_and_the_slot():
    assert slot_ids(A, 3) == ["GPU-a::0", "GPU-a::1", "GPU-a::2"]
    assert parse_slot_id(slot_id(A, 12)) == (A, 12)
    assert parse_slot_id("MIG-x::y::4") == ("MIG-x::y", 4)


@pytest.mark.parametrize("bad", ["", "GPU-a", "GPU-a::", "::1", "GPU-a::-1", "GPU-a::1x",
                                 "GPU-a::١", "GPU-a:1", "GPU-a::01", "GPU-a:: 1"])
def test_malformed_ids_do_not_parse(bad):
    assert parse_slot_id(bad) is None


def test_one_slot_goes_to_the_gpu_with_most_free_slots():
    available = [slot_id(A, 0), slot_id(B, 0), slot_id(B, 1), slot_id(C, 2), slot_id(C, 0)]
    assert preferred(available, [], 1) == [slot_id(B, 0)]


def test_several_slots_are_packed_onto_one_gpu_lowest_slots_first():
    available = [slot_id(A, 0), slot_id(B, 2), slot_id(A, 1), slot_id(B, 1), slot_id(B, 0)]
    assert preferred(available, [], 2) == [slot_id(B, 0), slot_id(B, 1)]


def test_slots_spill_to_the_next_freest_gpu_when_one_is_not_enough():
    available = [slot_id(A, 0), slot_id(B, 0), slot_id(B, 1), slot_id(C, 0)]
    assert preferred(available, [], 3) == [slot_id(B, 0), slot_id(B, 1), slot_id(A, 0)]


def test_required_slots_come_first_and_their_gpu_is_filled_before_others():
    available = [slot_id(A, 0), slot_id(A, 1), slot_id(B, 0), slot_id(B, 1), slot_id(B, 2)]
    assert preferred(available, [slot_id(A, 1)], 2) == [slot_id(A, 1), slot_id(A, 0)]


def test_preferred_never_offers_more_than_there_is_nor_bad_ids():
    assert preferred([slot_id(A, 0), "junk", slot_id(A, 0)], ["junk"], 5) == [slot_id(A, 0)]
    assert preferred([slot_id(A, 0)], [], 0) == []
    assert preferred([slot_id(A, 0)], [], -3) == []


PATHS = Paths(library="/host/lib/libnvs.so", scheduler_socket="/host/run/gs/sched.sock")
INDICES = {B: 0, A: 1}
COUNTS = {B: 4, A: 4}


def slots_response(device_ids: list[str], paths: Paths = PATHS):
    return container_response(units_by_gpu(SLOT_RESOURCE, device_ids, COUNTS, INDICES), paths)


def test_a_container_gets_the_library_the_socket_and_its_gpus_in_index_order():
    assert units_by_gpu(SLOT_RESOURCE, [slot_id(A, 0), slot_id(B, 3), slot_id(A, 2)], COUNTS,
                        INDICES) == {B: 1, A: 2}
    response = slots_response([slot_id(A, 0), slot_id(B, 3), slot_id(A, 2)])
    assert dict(response.envs) == {"LD_PRELOAD": CONTAINER_LIBRARY,
                                   "GEMSHARE_SOCKET": f"{CONTAINER_SOCKET_DIR}/sched.sock",
                                   "NVIDIA_VISIBLE_DEVICES": f"{B},{A}"}
    assert [(m.host_path, m.container_path, m.read_only) for m in response.mounts] == [
        ("/host/lib/libnvs.so", CONTAINER_LIBRARY, True),
        ("/host/run/gs", CONTAINER_SOCKET_DIR, True)]


def test_with_mps_a_container_also_gets_the_pipe_directory_at_its_host_path_and_shm():
    pipe = "/host/run/gs/mps/pipe"
    mps = Paths(library=PATHS.library, scheduler_socket=PATHS.scheduler_socket,
                mps_pipe_directory=pipe)
    plain = slots_response([slot_id(A, 0)])
    response = slots_response([slot_id(A, 0)], mps)
    # No CUDA_MPS_* here: the scheduler decides per program, and the library sets them.
    assert dict(response.envs) == dict(plain.envs)
    assert list(response.mounts[:2]) == list(plain.mounts)
    assert [(m.host_path, m.container_path, m.read_only) for m in response.mounts[2:]] == [
        (pipe, pipe, False), (SHARED_MEMORY_DIR, SHARED_MEMORY_DIR, False)]


def test_unknown_ids_are_all_named_and_long_lists_cut_short():
    with pytest.raises(UnknownDevices) as refused:
        slots_response([slot_id(A, 0), "GPU-z::1", "x" * 500])
    message = str(refused.value)
    assert "'GPU-z::1'" in message and "x" * 80 in message and "x" * 81 not in message
    many = [f"GPU-z::{n}" for n in range(20)]
    with pytest.raises(UnknownDevices, match="and 15 more"):
        slots_response(many)


def test_a_slot_past_the_count_is_unknown():
    assert slots_response([slot_id(A, 3)]).envs
    with pytest.raises(UnknownDevices, match="as GPU-UUID::SLOT, numbered from 0 to 3, for the "
                                             "GPUs GPU-b, GPU-a"):
        slots_response([slot_id(A, 4)])
