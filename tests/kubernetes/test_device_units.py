"""The memory and compute units' device IDs: what is written reads back, and nothing else does."""

from __future__ import annotations

import pytest

from gemshare_nvs.kubernetes.device_units import (COMPUTE, MEMORY, MIB, Unit, compute_unit_id,
                                                   memory_unit_id, parse_unit_id)

UUID = "GPU-8f3c1d2e-0000-1111-2222-333344445555"


def test_a_memory_unit_names_its_gpu_its_size_and_its_number():
    device_id = memory_unit_id(UUID, 1024, 7)
    assert device_id == f"{UUID}::m1024::7"
    assert parse_unit_id(device_id) == Unit(MEMORY, UUID, 7, 1024 * MIB)
    assert parse_unit_id(device_id).device_id == device_id


def test_a_compute_unit_names_its_gpu_and_its_number():
    device_id = compute_unit_id(UUID, 99)
    assert parse_unit_id(device_id) == Unit(COMPUTE, UUID, 99)
    assert parse_unit_id(device_id).device_id == device_id


def test_the_longest_ids_stay_within_what_the_kubelet_takes():
    assert len(memory_unit_id(UUID, 65536, 99999)) <= 63
    assert len(compute_unit_id(UUID, 99)) <= 63


@pytest.mark.parametrize("device_id", [
    f"{UUID}::3",  # a slot
    f"{UUID}::c::100",  # past a GPU's hundred
    f"{UUID}::c::07", f"{UUID}::c::-1", f"{UUID}::c::", f"{UUID}::m0::1", f"{UUID}::m::1",
    f"{UUID}::m01::1", f"{UUID}::x1::1", f"::c::1", f"{UUID}::m1024::1::2", "", "garbage",
    f"{UUID}::c::\u0661",  # a digit, but not an ASCII one
])
def test_anything_else_is_no_unit(device_id):
    assert parse_unit_id(device_id) is None
