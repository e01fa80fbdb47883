"""Which GPU a client means when it names a device.

The scheduler numbers the node's GPUs once for everyone (NVML's index, where NVML knows the GPU);
each client numbers them by its own CUDA ordinals, which depend on its CUDA_VISIBLE_DEVICES. A
client says which physical GPU each device it uses is (DEVICE_UUID), and from then on that
device is keyed by the scheduler's index, while messages to the client still use its ordinal.
Pure bookkeeping: policy.py asks and acts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ... import protocol as p
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
    """One client's numbering of GPUs beside the scheduler's.

    Until a UUID says otherwise the client's ordinals are taken as the scheduler's indices. Each
    UUID it sends fixes one ordinal to the index of that GPU; once one ordinal maps elsewhere than
    its own number ("renumbered"), ordinals without a UUID mean nothing to the scheduler."""
    ordinal: int  # what the client itself calls the GPU it registered (its CUDA ordinal)
    known: dict[int, int] = field(default_factory=dict)  # ordinal -> index, from its UUID
    uuids: dict[int, str] = field(default_factory=dict)  # ordinal -> that GPU's UUID
    named: set[int] = field(default_factory=set)  # devices it has named, in its own numbering

    @classmethod
    def registered(cls, ordinal: int) -> Numbering:
        return cls(ordinal, named={ordinal})

    @property
    def device(self) -> int:
        """The scheduler's index for the registered GPU."""
        return self.known.get(self.ordinal, self.ordinal)

    @property
    def gpu_uuid(self) -> str:
        """The registered GPU's UUID, "" until the client has said it."""
        return self.uuids.get(self.ordinal, "")

    def may_name(self, ordinal: int, count: bool = True) -> bool:
        """Whether naming `ordinal` keeps the client within MAX_DEVICES_PER_CLIENT; counts it
        unless told not to."""
        if ordinal not in self.named and len(self.named) >= MAX_DEVICES_PER_CLIENT:
            return False
        if count:
            self.named.add(ordinal)
        return True

    def takes_uuid(self, ordinal: int, uuid: str) -> bool:
        """Whether a UUID for the client's device `ordinal` is one to use: the first for it."""
        return bool(uuid) and ordinal not in self.uuids

    def moves(self, ordinal: int, index: int) -> dict[int, int | None]:
        """How learning that `ordinal` is the scheduler's `index` would change the indices the
        client's state is kept under: old index -> new one, or None where that state would no
        longer mean a known GPU. Changes nothing."""
        after = {**self.known, ordinal: index}
        moves = {}
        for named in self.named | {ordinal}:
            old, new = self._index(named, self.known), self._index(named, after)
            if old is not None and old != new:
                moves[old] = new
        return moves

    def learn(self, ordinal: int, uuid: str, index: int) -> dict[int, int | None]:
        """The client's `ordinal` is GPU `uuid`, the scheduler's `index`; returns `moves`."""
        moves = self.moves(ordinal, index)
        self.known[ordinal], self.uuids[ordinal] = index, uuid
        return moves

    def scheduler_device(self, ordinal: int) -> int | None:
        """The scheduler's index for a device the client names by its own ordinal; None for one
        whose GPU is unknown once the client is renumbered (never the registered one, which is
        taken by its number until its UUID comes)."""
        return self._index(ordinal, self.known)

    def _index(self, ordinal: int, known: dict[int, int]) -> int | None:
        if ordinal in known:
            return known[ordinal]
        renumbered = any(index != named for named, index in known.items())
        return None if renumbered and ordinal != self.ordinal else ordinal

    def own_ordinal(self, device: int) -> int:
        """What the client calls the scheduler's device `device`."""
        return next((ordinal for ordinal, index in self.known.items() if index == device), device)


class GpuIndices:
    """The scheduler's index for each GPU, by UUID."""

    def __init__(self, nvml: dict[str, int] | None = None):
        self.nvml = dict(nvml or {})  # GPU UUID -> NVML index, read once by the shell
        self.given: dict[str, int] = {}  # GPUs NVML did not name: UUID -> index given

    def uuid_of(self, index: int) -> str:
        """The UUID of the GPU the scheduler numbers `index`; "" while none is known."""
        for uuid, known in (*self.nvml.items(), *self.given.items()):
            if known == index:
                return uuid
        return ""

    def known_index(self, uuid: str) -> int | None:
        """The index of a GPU NVML named or a client said, None for one never seen."""
        return self.nvml.get(uuid, self.given.get(uuid)) if uuid else None

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
