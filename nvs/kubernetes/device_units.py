"""The device IDs of the device plugin's memory and compute units, written and read in one place.

The plugin advertises them to the kubelet; the scheduler reads them back from the kubelet's
pod-resources API to learn what a container was given. Every ID names its GPU and, for memory,
the size of its unit, so that the scheduler needs no table shared with the plugin and an ID
keeps its meaning across plugin restarts (the kubelet keeps allocations by ID):

- a memory unit: `GPU-UUID::m<MiB>::<index>` (`GPU-8f3c...::m1024::7`: 1 GiB);
- a compute unit: `GPU-UUID::c::<index>`, 100 per GPU.

Slots (`GPU-UUID::<index>`, plugin/slots.py) never parse as either.
"""

from __future__ import annotations

from dataclasses import dataclass

SEPARATOR = "::"
MEMORY = "memory"
COMPUTE = "compute"
COMPUTE_TAG = "c"
MEMORY_TAG = "m"
COMPUTE_UNITS_PER_GPU = 100
MIB = 1 << 20


@dataclass(frozen=True)
class Unit:
    kind: str  # MEMORY or COMPUTE
    gpu_uuid: str
    index: int
    unit_bytes: int = 0  # a memory unit's size; 0 for compute

    @property
    def device_id(self) -> str:
        if self.kind == MEMORY:
            return memory_unit_id(self.gpu_uuid, self.unit_bytes // MIB, self.index)
        return compute_unit_id(self.gpu_uuid, self.index)


def memory_unit_id(gpu_uuid: str, unit_mib: int, index: int) -> str:
    return f"{gpu_uuid}{SEPARATOR}{MEMORY_TAG}{unit_mib}{SEPARATOR}{index}"


def compute_unit_id(gpu_uuid: str, index: int) -> str:
    return f"{gpu_uuid}{SEPARATOR}{COMPUTE_TAG}{SEPARATOR}{index}"


def _number(text: str) -> int | None:
    """A decimal number as written by the functions above (no sign, no leading zero), else None."""
    if not text.isascii() or not text.isdigit() or str(int(text)) != text:
        return None
    return int(text)


def parse_unit_id(device_id: str) -> Unit | None:
    """The unit an ID names, or None for anything the functions above do not write."""
    parts = device_id.split(SEPARATOR)
    if len(parts) != 3 or not parts[0]:
        return None
    uuid, tag, index_text = parts
    index = _number(index_text)
    if index is None:
        return None
    if tag == COMPUTE_TAG:
        return Unit(COMPUTE, uuid, index) if index < COMPUTE_UNITS_PER_GPU else None
    if tag.startswith(MEMORY_TAG):
        size = _number(tag[len(MEMORY_TAG):])
        if size:
            return Unit(MEMORY, uuid, index, size * MIB)
    return None
