"""The node's ResourceSlice (resource.k8s.io/v1): one device per GPU, each with its own capacity,
so that the kube-scheduler's allocator never places a claim on a GPU that cannot hold it.

Each device may be allocated to many claims at once (`allowMultipleAllocations`, consumable
capacity, KEP-5075): a claim consumes `memory` (bytes, in steps of the memory unit) and
`compute` (hundredths of the GPU) of it, and the allocator keeps the sum within the device's
capacity. A claim that names no amount consumes the request policy's default: one memory unit
and ten compute units, as much weight as a program without units has. `memory` is the GPU's
memory times the overcommit, rounded down to whole units: above 1, Unified Memory moves what
does not fit to the host.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gemshare_nvs.kubernetes.claim_devices import COMPUTE_UNITS_PER_GPU, DRIVER

from .inventory import GpuInfo, Inventory

API_VERSION = "resource.k8s.io/v1"
DEFAULT_COMPUTE = 10
_UUID = re.compile(r"GPU-([0-9a-fA-F-]{1,59})")


@dataclass(frozen=True)
class Capacity:
    memory_unit: int  # bytes: the step a claim's memory is rounded up to
    memory_overcommit: float = 1.0

    def memory(self, gpu: GpuInfo) -> int:
        return int(gpu.memory_bytes * self.memory_overcommit) // self.memory_unit * \
            self.memory_unit


def device_name(gpu: GpuInfo) -> str:
    """The GPU's device name: its UUID as a DNS label (`gpu-8f3c1d2e-...`), the same wherever
    the GPU's index moves; `gpu-<index>` for a UUID that cannot be one."""
    match = _UUID.fullmatch(gpu.uuid)
    return f"gpu-{match[1].lower()}" if match else f"gpu-{gpu.index}"


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER}"


def _attributes(gpu: GpuInfo, inventory: Inventory) -> dict:
    attributes = {"uuid": {"string": gpu.uuid}, "index": {"int": gpu.index},
                  "productName": {"string": gpu.product or "unknown"}}
    if inventory.driver_version:
        attributes["driverVersion"] = {"string": inventory.driver_version}
    if inventory.cuda_version:
        attributes["cudaVersion"] = {"version": f"{inventory.cuda_version}.0"}
    if gpu.pci_bus_id:
        attributes["pciBusID"] = {"string": gpu.pci_bus_id}
    if gpu.numa_node is not None:
        attributes["numaNode"] = {"int": gpu.numa_node}
    return attributes


def binary_quantity(size: int) -> str:
    """Bytes as the API server writes a quantity back (its canonical form: the largest binary
    suffix that leaves a whole number), so that the slice it keeps reads as the one put."""
    for shift, suffix in ((50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")):
        if size and size % (1 << shift) == 0:
            return f"{size >> shift}{suffix}"
    return str(size)


def device(gpu: GpuInfo, inventory: Inventory, capacity: Capacity) -> dict:
    unit = binary_quantity(capacity.memory_unit)
    memory = binary_quantity(capacity.memory(gpu))
    return {
        "name": device_name(gpu),
        "attributes": _attributes(gpu, inventory),
        "capacity": {
            "memory": {"value": memory, "requestPolicy": {
                "default": unit, "validRange": {"min": unit, "max": memory, "step": unit}}},
            "compute": {"value": str(COMPUTE_UNITS_PER_GPU), "requestPolicy": {
                "default": str(DEFAULT_COMPUTE),
                "validRange": {"min": "1", "max": str(COMPUTE_UNITS_PER_GPU), "step": "1"}}},
        },
        "allowMultipleAllocations": True,
    }


def resource_slice(node: str, inventory: Inventory, capacity: Capacity, generation: int,
                   owner: dict | None = None) -> dict:
    """The slice's object; `owner` the Node's ownerReference (the slice goes with the node)."""
    usable = [gpu for gpu in inventory.gpus if capacity.memory(gpu) >= capacity.memory_unit]
    metadata = {"name": slice_name(node)}
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return {
        "apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": metadata,
        "spec": {"driver": DRIVER, "nodeName": node,
                 "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                 "devices": [device(gpu, inventory, capacity) for gpu in usable]},
    }
