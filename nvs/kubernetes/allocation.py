"""A container's memory and compute units per GPU, from the device IDs the kubelet lists for it.

Units are recognised by their IDs (device_units.py), whatever the resource they were asked under;
slots and other devices are not units and count for nothing here.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..core.model.container import GpuUnits
from .device_units import COMPUTE, MEMORY, parse_unit_id


def units_by_gpu(device_ids: Iterable[str]) -> tuple[GpuUnits, ...]:
    """Each GPU's units among `device_ids` (a unit listed twice counts once), by GPU UUID."""
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
    return tuple(GpuUnits(uuid, memory_units=len(memory.get(uuid, {})),
                          memory_bytes=sum(memory.get(uuid, {}).values()),
                          compute_units=len(compute.get(uuid, ())))
                 for uuid in sorted({*memory, *compute}))
