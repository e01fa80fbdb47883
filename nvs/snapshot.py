"""The policy core's state at one moment, as plain data for whatever reports on it.

Status reads this instead of the policy's own structures, so the rules may keep their state as
suits them. Nothing in a snapshot changes with later events.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .cost import Link
from .gangs import Gang
from .protocol import Mode
from .state import Client, Registration
from .terms import Terms

if TYPE_CHECKING:
    from .policy import Policy


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
    link: Link | None  # what the moves so far have shown; None before any
    slices: dict[int, float]  # holder -> seconds held in this grant
    turns: dict[int, float]  # holder -> its quantum in this grant, seconds
    last_end: tuple[int, str] | None  # (client, why) of the hold that ended last


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
    gang: str  # the name of the job it belongs to, "" for none
    holding: list[int]  # the devices whose lock it holds
    waiting: list[int]  # and those it waits for


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


def snapshot_of(policy: Policy, now: float, devices: Iterable[int] = ()) -> Snapshot:
    """`policy` at `now`, with an entry for each device it knows and each of `devices`."""
    indices = set(devices) | set(policy.devices) | set(policy.links)
    allocated = Counter()
    for client in policy.clients.values():
        indices |= {client.numbering.device, *client.allocated}
        allocated.update(client.allocated)
    return Snapshot(tq=policy.tq, mode=policy.mode, min_slice_ms=policy.min_slice_ms,
                    max_clients=policy.max_clients,
                    revocations=policy.revocations,
                    devices=[_device(policy, index, allocated[index], now)
                             for index in sorted(indices)],
                    clients=[_client(policy, cid, client, now)
                             for cid, client in sorted(policy.clients.items())],
                    gangs=[_gang(gang, now) for gang in policy.gangs])


def _device(policy: Policy, index: int, allocated: int, now: float) -> DeviceSnapshot:
    dev = policy.devices.get(index)
    holds = dev.holders if dev else {}
    capacity, source = policy.capacity.of(index)
    link = policy.links.get(index)
    return DeviceSnapshot(
        index=index, holders=list(holds), waiters=list(dev.waiters) if dev else [],
        dropping=[cid for cid, hold in holds.items() if hold.dropped_at is not None],
        evicting=sorted(dev.evictions) if dev else [],
        idle_hints_ms={cid: hold.idle_hint_ms for cid, hold in holds.items() if hold.idle_hint_ms},
        allocated=allocated, reported_total=policy.capacity.reported(index), capacity=capacity,
        capacity_source=source, reserve=policy.reserve,
        holders_allocated=policy.holders_memory(index),
        resident=policy.residency.total(index), switch_seconds=policy.switch_seconds(index),
        link=copy.deepcopy(link), slices={cid: now - hold.granted_at for cid, hold in holds.items()},
        turns={cid: hold.turn_s for cid, hold in holds.items()},
        last_end=policy.last_end.get(index))


def _client(policy: Policy, cid: int, client: Client, now: float) -> ClientSnapshot:
    holding = [dev.holders[cid] for dev in policy.devices.values() if cid in dev.holders]
    waiting = [dev.waiters[cid] for dev in policy.devices.values() if cid in dev.waiters]
    state = "holding" if holding else "waiting" if waiting else "idle"
    numbering = client.numbering
    return ClientSnapshot(
        registration=client.registration, device=numbering.device, gpu_uuid=numbering.gpu_uuid,
        state=state, hold_time=client.hold_time + sum(now - hold.granted_at for hold in holding),
        waits=client.waits,
        wait_time=client.wait_time + sum(now - wait.since for wait in waiting if wait.queued),
        allocated=dict(sorted(client.allocated.items())),
        resident=policy.residency.of(numbering.device, cid),
        revocations=client.revocations, revoked=client.revoked, terms=client.terms,
        overrides=dict(client.overrides),
        label=client.identity.label if client.identity else "",
        usage=dict(sorted(policy.usage.of_client(cid, now).items())),
        gang=gang.name if (gang := policy.gangs.of_client.get(cid)) else "",
        holding=sorted(index for index, dev in policy.devices.items() if cid in dev.holders),
        waiting=sorted(index for index, dev in policy.devices.items() if cid in dev.waiters))


def _gang(gang: Gang, now: float) -> GangSnapshot:
    turn = gang.turn_devices
    return GangSnapshot(name=gang.name, uid=gang.uid, size=gang.size, world_size=gang.world_size,
                        state=gang.state, members=dict(gang.members),
                        turn_devices=sorted(turn) if turn is not None else None,
                        turn_left_s=max(gang.turn_ends - now, 0.0) if turn is not None else None)
