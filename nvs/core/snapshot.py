"""The policy core's state at one moment, as plain data for whatever reports on it.

Status reads this instead of the policy's own structures, so the rules may keep their state as
suits them. Nothing in a snapshot changes with later events.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..protocol import Mode
from .model.container import NAMED_BY_PROGRAM, GpuUnits, NodeIdentity
from .model.decision import Decision
from .model.state import Registration
from .model.terms import Terms
from .rules.cost import Link
from .rules.gangs import Gang


@dataclass(frozen=True)
class DeviceSnapshot:
    index: int
    holders: list[int]  # oldest grant first
    waiters: list[int]  # first come first
    dropping: list[int]  # holders told to drop the lock
    evicting: list[int]  # clients asked to move memory out that have not answered, by id
    idle_hints_ms: dict[int, int]  # holder -> the IDLE_HINT it was last sent, where not 0
    allocated: int  # bytes, every client's
    reported_total: int  # the largest total a client's driver reported for it; 0 when none
    capacity: int | None  # what mode auto decides with (None when unknown), and from where
    capacity_source: str | None
    reserve: int  # set aside per holder for its CUDA context
    holders_allocated: int  # bytes, those holding now (dropping or not)
    resident: int  # bytes the scheduler believes are on the device
    switch_seconds: float  # what handing the device to its head waiter now would cost in moves
    loan_seconds: float  # what lending the holder's idle gap to it and back would (0: no waiter)
    lender: int | None  # whose idle gap is lent now (None: none)
    loan_left_s: float | None  # until the lender's turn would end
    borrowers: list[int]  # holders granted in the lender's gap, who give it back
    link: Link | None  # what the moves so far have shown; None before any
    link_prior_bps: float | None  # what its host link is expected to carry (NVML), if known
    slices: dict[int, float]  # holder -> seconds held in this grant
    turns: dict[int, float]  # holder -> its quantum in this grant, seconds
    last_end: tuple[int, str] | None  # (client, why) of the hold that ended last
    # client -> the decision that stands for it, and the stage that made it (pipeline.py): a
    # holder's grant or drop, a waiter's reason to wait
    decisions: dict[int, Decision]
    last_drop: Decision | None  # the drop that ended the last hold, if a drop ended it


@dataclass(frozen=True)
class ClientSnapshot:
    registration: Registration  # who it is
    device: int  # its registered GPU, as the scheduler numbers GPUs
    gpu_uuid: str  # "" until it says
    state: str  # holding, waiting or idle
    hold_time: float  # seconds, a running hold included
    waits: int
    wait_time: float  # seconds, a running wait included
    allocated: dict[int, int]  # device -> bytes, by device
    resident: int  # bytes on its registered GPU, as the scheduler believes
    revocations: int
    revoked: bool
    terms: Terms  # its share and limits, and where each came from
    overrides: dict  # term -> value given with gemsharectl, for this connection only
    label: str
    usage: dict[int, float]  # device -> decayed lock seconds (usage.py)
    gaps: dict[int, float]  # device -> its expected idle gap there, where one was seen (gaps.py)
    gang: str  # the name of the job it belongs to, "" for none
    holding: list[int]  # the devices whose lock it holds
    waiting: list[int]  # and those it waits for
    mps: bool  # it goes through the MPS server
    mps_why: str  # why not, when the scheduler runs MPS and it does not
    node: NodeIdentity | None  # its container, as the node says; None when it does not
    units: GpuUnits | None  # its container's units on its GPU, the budget it shares
    others_allocated: int  # bytes the others sharing that budget have allocated
    sharing: list[int]  # the clients sharing that budget, itself included; [] for none
    identity_from: str = NAMED_BY_PROGRAM  # who named it (model/container.py)
    throttled: list[int] = field(default_factory=list)  # devices (checks/throttle.py)
    refused: dict[int, str] = field(default_factory=dict)  # device -> why (checks/claims.py)
    # device -> staging memory it was told to prepare there (room_rules.py, staging_budget.py)
    staging: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class GangSnapshot:
    name: str
    uid: int
    size: int  # members expected on this node
    world_size: int
    state: str  # forming, complete or broken (gangs.py)
    members: dict[int, int]  # client -> rank, in the order they joined
    turn_devices: list[int] | None  # the devices of its running turn; None between turns
    turn_left_s: float | None  # until its quantum is over, in a turn

    @classmethod
    def of(cls, gang: Gang, now: float) -> GangSnapshot:
        turn = gang.turn_devices
        return cls(name=gang.name, uid=gang.uid, size=gang.size, world_size=gang.world_size,
                   state=gang.state, members=dict(gang.members),
                   turn_devices=sorted(turn) if turn is not None else None,
                   turn_left_s=max(gang.turn_ends - now, 0.0) if turn is not None else None)


@dataclass(frozen=True)
class Snapshot:
    tq: int
    mode: Mode
    min_slice_ms: int
    max_clients: int
    revocations: int
    devices: list[DeviceSnapshot]  # by index
    clients: list[ClientSnapshot]  # by id
    gangs: list[GangSnapshot]  # as they formed
    staging: dict = field(default_factory=dict)  # the host memory staging may take (view())
    # what the node's containers' units leave each GPU (budgets.py's unheld_view)
    unheld: list[dict] = field(default_factory=list)
