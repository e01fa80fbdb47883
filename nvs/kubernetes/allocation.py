"""A container's memory and compute units per GPU, from the device IDs the kubelet lists for it
and the CDI devices of its DRA claims.

Units are recognised by their IDs (device_units.py), whatever the resource they were asked under;
slots and other devices are not units and count for nothing here. A claim's device names its
GPU's memory and compute units itself (claim_devices.py); a container with several claims on
one GPU has their sum, compute at most the whole GPU. `held_by_gpu` adds up every container's.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..core.model.container import GpuUnits, HeldUnits
from .claim_devices import parse_cdi_id
from .device_units import COMPUTE, COMPUTE_UNITS_PER_GPU, MEMORY, parse_unit_id


def units_by_gpu(device_ids: Iterable[str],
                 claim_cdi_ids: Iterable[str] = ()) -> tuple[GpuUnits, ...]:
    """Each GPU's units among `device_ids` (a unit listed twice counts once) and the claims'
    devices among `claim_cdi_ids` (one listed twice counts once), by GPU UUID."""
    memory: dict[str, dict[int, int]] = {}  # GPU -> unit index -> its bytes
    compute: dict[str, set[int]] = {}  # GPU -> unit indices
    for device_id in device_ids:
        unit = parse_unit_id(device_id)
        if unit is None:
            continue
        if unit.kind == MEMORY:
            memory.setdefault(unit.gpu_uuid, {})[unit.index] = unit.unit_bytes
        elif unit.kind == COMPUTE:
            compute.setdefault(unit.gpu_uuid, set()).add(unit.index)
    claimed: dict[str, set] = {}  # GPU -> its claims' devices
    for cdi_id in claim_cdi_ids:
        device = parse_cdi_id(cdi_id)
        if device is not None:
            claimed.setdefault(device.gpu_uuid, set()).add(device)
    return tuple(GpuUnits(uuid, memory_units=len(memory.get(uuid, {})),
                          memory_bytes=sum(memory.get(uuid, {}).values()) +
                          sum(device.memory_bytes for device in claimed.get(uuid, ())),
                          compute_units=min(COMPUTE_UNITS_PER_GPU, len(compute.get(uuid, ())) +
                                            sum(device.compute_units
                                                for device in claimed.get(uuid, ()))))
                 for uuid in sorted({*memory, *compute, *claimed}))


def held_by_gpu(containers: Iterable[tuple[Iterable[str], Iterable[str]]]) -> tuple[HeldUnits, ...]:
    """What all `containers` (each its device IDs and claims' CDI IDs) hold of each GPU
    together, by GPU UUID; a GPU none of them has units on is not listed."""
    held: dict[str, HeldUnits] = {}
    for device_ids, claim_cdi_ids in containers:
        for units in units_by_gpu(device_ids, claim_cdi_ids):
            before = held.get(units.gpu_uuid, HeldUnits(units.gpu_uuid))
            held[units.gpu_uuid] = HeldUnits(
                units.gpu_uuid, before.memory_bytes + units.memory_bytes,
                before.compute_units + units.compute_units, before.containers + 1)
    return tuple(held[uuid] for uuid in sorted(held))
