"""Preparing a claim: read its allocation from the API server (which of this node's devices it
got, and how much of each it consumes), write the CDI spec that its containers get, and answer
with the CDI devices, whose IDs carry the claim's terms to the scheduler (claim_devices.py).

Idempotent both ways: a claim whose spec is here is answered from it, without the API server
(the kubelet asks again after its own restart); unpreparing a claim without a spec succeeds.
A claim that consumed no capacity (an API server without consumable capacity, where a device
goes to one claim whole) gets the whole GPU. A claim of the whole-GPU class (its config says
`whole: true`) must consume the whole device: otherwise other claims could share it, and the
preparation fails saying so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from gemshare_nvs.kubernetes.claim_devices import COMPUTE_UNITS_PER_GPU, DRIVER, ClaimDevice

from .api_server import ApiError
from .cdi import CdiSpecs, HostPaths, Prepared, container_edits
from .inventory import GpuInfo, Inventory
from .resource_slice import Capacity, device_name

WHOLE_PARAMETER = "whole"


class PrepareError(Exception):
    """Why a claim cannot be prepared (or unprepared) now; the kubelet asks again."""


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    uid: str
    name: str

    @property
    def qualified(self) -> str:
        return f"{self.namespace}/{self.name}"


def quantity(text, what: str) -> int:
    """A Kubernetes quantity ("8Gi", "30", "1.5G") as a whole number, rounded up."""
    from kubernetes.utils.quantity import parse_quantity

    try:
        value = Decimal(parse_quantity(text))
    except (ValueError, TypeError, InvalidOperation):
        raise PrepareError(f"{what} {text!r} is not a quantity") from None
    return int(value.to_integral_value(rounding="ROUND_CEILING"))


def _whole_requests(devices: dict) -> tuple[set[str], bool]:
    """The requests the whole-GPU class's config covers, and whether it covers every one."""
    names, every = set(), False
    for config in devices.get("config") or []:
        opaque = config.get("opaque") or {}
        if opaque.get("driver") != DRIVER or \
                not (opaque.get("parameters") or {}).get(WHOLE_PARAMETER):
            continue
        requests = config.get("requests") or []
        names.update(requests)
        every = every or not requests
    return names, every


class Preparer:
    def __init__(self, node: str, api, inventory: Callable[[], Inventory], capacity: Capacity,
                 specs: CdiSpecs, paths: HostPaths):
        self.node = node
        self.api = api  # an ApiServer, or anything with its claim()
        self.inventory = inventory
        self.capacity = capacity
        self.specs = specs
        self.paths = paths

    def prepare(self, ref: ClaimRef) -> list[Prepared]:
        kept = self.specs.prepared(ref.uid)
        if kept is not None:
            return kept
        try:
            claim = self.api.claim(ref.namespace, ref.name)
        except ApiError as error:
            raise PrepareError(str(error)) from None
        uid = (claim.get("metadata") or {}).get("uid")
        if uid != ref.uid:
            raise PrepareError(f"claim {ref.qualified} is now another object (UID {uid}, not "
                               f"{ref.uid})")
        allocation = (claim.get("status") or {}).get("allocation") or {}
        devices = allocation.get("devices") or {}
        results = [result for result in devices.get("results") or []
                   if result.get("driver") == DRIVER and result.get("pool") == self.node]
        if not results:
            raise PrepareError(f"claim {ref.qualified} has no device of {DRIVER} on node "
                               f"{self.node} in its allocation")
        gpus = {device_name(gpu): gpu for gpu in self.inventory().gpus}
        whole_names, whole_all = _whole_requests(devices)
        edits, prepared = [], []
        for result in results:
            gpu = gpus.get(result.get("device"))
            if gpu is None:
                raise PrepareError(f"claim {ref.qualified} was given device "
                                   f"{result.get('device')!r}, which is not one of this node's "
                                   f"GPUs now")
            whole = whole_all or result.get("request") in whole_names
            device = self._device(ref, result, gpu, whole)
            edits.append((device, container_edits(device, gpu.minor, self.paths)))
            prepared.append(Prepared((result.get("request", ""),), self.node, result["device"],
                                     (device.cdi_id,), result.get("shareID")))
        self.specs.write(ref.qualified, ref.uid, edits, prepared)
        return prepared

    def _device(self, ref: ClaimRef, result: dict, gpu: GpuInfo, whole: bool) -> ClaimDevice:
        capacity = self.capacity.memory(gpu)
        consumed = result.get("consumedCapacity")
        if not consumed:
            return ClaimDevice(gpu.uuid, capacity, COMPUTE_UNITS_PER_GPU, ref.uid)
        memory = quantity(consumed.get("memory", "0"), "consumed memory")
        compute = quantity(consumed.get("compute", "0"), "consumed compute")
        if whole and (memory < capacity or compute < COMPUTE_UNITS_PER_GPU):
            raise PrepareError(
                f"claim {ref.qualified} asks for a whole GPU but consumes {memory} bytes and "
                f"{compute} compute units of {result['device']}, which has {capacity} and "
                f"{COMPUTE_UNITS_PER_GPU}: its request must ask for capacity memory: {capacity} "
                f"and compute: {COMPUTE_UNITS_PER_GPU}, or other claims could share the GPU")
        if memory > capacity or not 0 <= compute <= COMPUTE_UNITS_PER_GPU:
            raise PrepareError(f"claim {ref.qualified} consumes {memory} bytes and {compute} "
                               f"compute units of {result['device']}, more than it has")
        return ClaimDevice(gpu.uuid, memory, compute, ref.uid)

    def unprepare(self, ref: ClaimRef) -> None:
        try:
            self.specs.remove(ref.uid)
        except OSError as exc:
            raise PrepareError(f"removing the CDI spec of claim {ref.qualified}: {exc}") \
                from None
