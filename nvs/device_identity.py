"""Which GPU a client means when it names a device.

The scheduler numbers the node's GPUs once for everyone (NVML's index, where NVML knows the GPU);
each client numbers them by its own CUDA ordinals, which depend on its CUDA_VISIBLE_DEVICES. A
client says which physical GPU its registered device is (DEVICE_UUID), and from then on that
device is keyed by the scheduler's index, while messages to the client still use its ordinal.
Only the registered device's identity is ever known. Pure bookkeeping: policy.py asks and acts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import protocol as p
from .actions import Close

# Device indices are u32 on the wire; a bound keeps one client from creating millions of queues.
MAX_DEVICES = 1024
# Distinct devices one client may name (REGISTER, REQUEST_LOCK, MEM_REPORT): far above any
# machine's GPU count, and low enough that no client can swell the status past one frame.
MAX_DEVICES_PER_CLIENT = 64


def out_of_range(cid: int, device: int) -> Close:
    return Close(cid, f"device index {device} is out of range (below {MAX_DEVICES})",
                 p.ErrorCode.PROTOCOL)


def too_many_devices(cid: int, device: int) -> Close:
    return Close(cid, f"device {device} is one too many: a client may name at most "
                      f"{MAX_DEVICES_PER_CLIENT} distinct devices", p.ErrorCode.PROTOCOL)


@dataclass
class Numbering:
    """One client's numbering of GPUs beside the scheduler's."""
    ordinal: int  # what the client itself calls the GPU it registered (its CUDA ordinal)
    device: int  # the scheduler's index for that GPU
    gpu_uuid: str = ""  # that GPU's UUID, once the client has said it
    named: set[int] = field(default_factory=set)  # devices it has named, in its own numbering

    @classmethod
    def registered(cls, ordinal: int) -> Numbering:
        """A client that registered its device `ordinal`: until it says which GPU that is, the
        scheduler takes the client's numbering as its own."""
        return cls(ordinal, ordinal, named={ordinal})

    def may_name(self, ordinal: int) -> bool:
        """Whether naming `ordinal` keeps the client within MAX_DEVICES_PER_CLIENT; counts it."""
        if ordinal not in self.named and len(self.named) >= MAX_DEVICES_PER_CLIENT:
            return False
        self.named.add(ordinal)
        return True

    def takes_uuid(self, ordinal: int, uuid: str) -> bool:
        """Whether a UUID for the client's device `ordinal` is one to use: only one, for the
        device it registered."""
        return ordinal == self.ordinal and bool(uuid) and not self.gpu_uuid

    def scheduler_device(self, ordinal: int) -> int | None:
        """The scheduler's index for a device the client names by its own ordinal. Other
        ordinals than the registered one are taken as they are when the client's numbering is
        the scheduler's, and are unknown (None) otherwise."""
        if ordinal == self.ordinal:
            return self.device
        return ordinal if self.device == self.ordinal else None

    def own_ordinal(self, device: int) -> int:
        """What the client calls the scheduler's device `device`."""
        return self.ordinal if device == self.device else device


class GpuIndices:
    """The scheduler's index for each GPU, by UUID."""

    def __init__(self, nvml: dict[str, int] | None = None):
        self.nvml = dict(nvml or {})  # GPU UUID -> NVML index, read once by the shell
        self.given: dict[str, int] = {}  # GPUs NVML did not name: UUID -> index given

    def index_of(self, uuid: str, ordinal: int) -> int:
        """NVML's index for the UUID; for a UUID NVML does not know, the index it was given when
        first seen (the client's `ordinal` if no other GPU has it, else the lowest free one);
        without a UUID, the client's ordinal as it is."""
        if not uuid:
            return ordinal
        if uuid in self.nvml:
            return self.nvml[uuid]
        if uuid not in self.given:
            taken = {*self.nvml.values(), *self.given.values()}
            free = ordinal if ordinal not in taken else \
                next((i for i in range(MAX_DEVICES) if i not in taken), None)
            if free is None:  # every index given away (a client inventing UUIDs): as before
                return ordinal
            self.given[uuid] = free
        return self.given[uuid]
