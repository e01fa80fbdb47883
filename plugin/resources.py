"""The three resources the plugin advertises, each its own registration with the kubelet, and
the device IDs of each.

- slots, `NAME` (`gemshare.io/gpu`): `--slots` per GPU, `GPU-UUID::SLOT` (slots.py): a place on
  a GPU, its share of time and memory left to the scheduler's rules;
- memory units, `NAME-memory` (`gemshare.io/gpu-memory`): as many per GPU as its memory holds at
  `--memory-unit` each, times `--memory-overcommit`; `GPU-UUID::m<MiB>::UNIT`;
- compute units, `NAME-compute` (`gemshare.io/gpu-compute`): 100 per GPU, `GPU-UUID::c::UNIT`.

Memory and compute unit IDs are written and read by nvs/kubernetes/device_units.py, where the
scheduler reads them back from the kubelet's pod-resources API. A slot may come from any GPU, so
a container's slots may span several; a container's memory or compute units are a budget on the
GPU they are on, so the plugin keeps each container's on one GPU (placement.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gemshare_nvs.kubernetes.device_units import (
    COMPUTE,
    COMPUTE_UNITS_PER_GPU,
    MEMORY,
    MIB,
    compute_unit_id,
    memory_unit_id,
    parse_unit_id,
)

from .gpu_health import Gpu
from .slots import parse_slot_id, slot_id

SLOTS = "slots"
MEMORY_SUFFIX = "-memory"
COMPUTE_SUFFIX = "-compute"
GIB = 1 << 30


def size_words(count: int) -> str:
    """Bytes as the plugin's messages write them: in the largest of TiB, GiB and MiB that
    divides them, else in MiB."""
    for unit, size in (("TiB", GIB << 10), ("GiB", GIB)):
        if count % size == 0:
            return f"{count // size} {unit}"
    return f"{count / MIB:g} MiB"


@dataclass(frozen=True)
class Resource:
    kind: str  # SLOTS, MEMORY or COMPUTE
    name: str  # the extended resource pods ask for
    slots: int = 0  # SLOTS: per GPU
    unit_bytes: int = 0  # MEMORY: the size of a unit
    overcommit: float = 1.0  # MEMORY: units per GPU are its memory times this, in units

    @property
    def one_gpu(self) -> bool:
        """Whether a container's units must all be on one GPU (a budget on that GPU)."""
        return self.kind != SLOTS

    def count(self, gpu: Gpu) -> int:
        """How many of this resource's units `gpu` has."""
        if self.kind == SLOTS:
            return self.slots
        if self.kind == COMPUTE:
            return COMPUTE_UNITS_PER_GPU
        return math.floor(gpu.memory_bytes * self.overcommit / self.unit_bytes)

    def device_id(self, uuid: str, index: int) -> str:
        if self.kind == SLOTS:
            return slot_id(uuid, index)
        if self.kind == COMPUTE:
            return compute_unit_id(uuid, index)
        return memory_unit_id(uuid, self.unit_bytes // MIB, index)

    def ids(self, gpu: Gpu) -> list[str]:
        return [self.device_id(gpu.uuid, index) for index in range(self.count(gpu))]

    def parse(self, device_id: str) -> tuple[str, int] | None:
        """(GPU UUID, index) of one of this resource's IDs, else None (a memory unit of another
        size too: it was advertised with another --memory-unit)."""
        if self.kind == SLOTS:
            return parse_slot_id(device_id)
        unit = parse_unit_id(device_id)
        if unit is None or unit.kind != self.kind or \
                (self.kind == MEMORY and unit.unit_bytes != self.unit_bytes):
            return None
        return unit.gpu_uuid, unit.index

    @property
    def id_shape(self) -> str:
        """How this resource's IDs look, for messages."""
        if self.kind == SLOTS:
            return "GPU-UUID::SLOT"
        if self.kind == COMPUTE:
            return "GPU-UUID::c::UNIT"
        return f"GPU-UUID::m{self.unit_bytes // MIB}::UNIT"

    def amount(self, count: int) -> str:
        """`count` units in words: "2 slots", "8 memory units (8 GiB)", "30 compute units"."""
        plural = "" if count == 1 else "s"
        if self.kind == SLOTS:
            return f"{count} slot{plural}"
        if self.kind == COMPUTE:
            return f"{count} compute unit{plural}"
        return f"{count} memory unit{plural} ({size_words(count * self.unit_bytes)})"

    def per_gpu_words(self) -> str:
        """What one GPU has, for the log."""
        if self.kind == SLOTS:
            return f"{self.slots} slots per GPU"
        if self.kind == COMPUTE:
            return f"{COMPUTE_UNITS_PER_GPU} compute units per GPU"
        overcommit = f" times {self.overcommit:g}" if self.overcommit != 1 else ""
        return f"a memory unit per {size_words(self.unit_bytes)} of each GPU's memory{overcommit}"


def family(slot_name: str, slots: int, memory_unit: int,
           memory_overcommit: float) -> tuple[Resource, Resource, Resource]:
    """The slots, memory and compute resources, named after the slots' resource."""
    return (Resource(SLOTS, slot_name, slots=slots),
            Resource(MEMORY, slot_name + MEMORY_SUFFIX, unit_bytes=memory_unit,
                     overcommit=memory_overcommit),
            Resource(COMPUTE, slot_name + COMPUTE_SUFFIX))


def family_names(slot_name: str) -> tuple[str, str, str]:
    return slot_name, slot_name + MEMORY_SUFFIX, slot_name + COMPUTE_SUFFIX
