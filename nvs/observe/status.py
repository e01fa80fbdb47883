"""The STATUS object of docs/protocol.md, built from a snapshot of the policy core's state.

Required keys come first; extra keys sit beside them (gemsharectl ignores what it does not know).
`fit_status` trims it to what one frame can carry.
"""

from __future__ import annotations

from ..core.model.container import GpuUnits, NodeIdentity
from ..core.model.decision import Decision
from ..core.model.terms import OVERRIDES_LAST, TERM_NAMES
from ..core.policy import Policy
from ..core.rules.usage import HALF_LIFE_S
from ..core.snapshot import ClientSnapshot, DeviceSnapshot, GangSnapshot
from ..protocol import REG_UNIFIED_MEMORY, ControlReply

# The status object's version, its first key: raised when a key changes meaning or goes away,
# not when one is added (readers ignore keys they do not know). docs/protocol.md lists them.
STATUS_SCHEMA = 1


def build_status(policy: Policy, now: float, wall: float, *, grace_ms: int,
                 gpus: list[dict] | None = None, extra: dict | None = None) -> dict:
    """`now` is the policy's clock, `wall` the Unix time; `gpus` comes from NVML when available."""
    by_index = {gpu["index"]: gpu for gpu in gpus or []}
    snapshot = policy.snapshot(now, devices=by_index)
    status = {
        "schema": STATUS_SCHEMA,
        "tq": snapshot.tq,
        "anti_thrash": snapshot.mode.label,
        "min_slice_ms": snapshot.min_slice_ms,
        "usage_half_life_s": HALF_LIFE_S,
        "grace_ms": grace_ms,
        "devices": [_device_entry(dev, by_index.get(dev.index, {})) for dev in snapshot.devices],
        "clients": [_client_entry(client) for client in snapshot.clients],
        "gangs": [_gang_entry(gang) for gang in snapshot.gangs],
        "max_clients": snapshot.max_clients,
        "revocations": snapshot.revocations,
        "nvml": gpus is not None,
        # Processes that NVML lists on a GPU and that are no client: they use it unscheduled.
        "unregistered": [{"device": device, "pid": found.pid, "name": found.name,
                          "uid": found.uid, "used_bytes": found.used_bytes}
                         for device, processes in sorted(policy.unregistered.now.items())
                         for found in processes],
        # The host memory all programs' staging may take, and what they were told to prepare.
        "staging": snapshot.staging,
        # Per GPU, what all the node's containers hold of memory and compute units, and what
        # that leaves to the containers without units of a kind (null: nobody holds it).
        "unheld": snapshot.unheld,
        "time": round(wall, 3),
    }
    status.update(extra or {})
    return status


def _device_entry(dev: DeviceSnapshot, gpu: dict) -> dict:
    entry = {"index": dev.index, "holders": dev.holders, "waiters": dev.waiters}
    last = dev.last_end
    entry.update({k: v for k, v in gpu.items() if k != "index"})
    entry.update({
        "dropping": dev.dropping,
        "drop_pending": bool(dev.dropping),
        "allocated_bytes": dev.allocated,
        # What the clients' drivers say the device holds; useful where NVML is missing.
        "reported_total_bytes": dev.reported_total,
        # What mode auto decides with: capacity (None when unknown), reserve per holder, and
        # the memory of those holding now.
        "capacity_bytes": dev.capacity,
        "capacity_source": dev.capacity_source,
        "context_reserve_bytes": dev.reserve,
        "holders_allocated_bytes": dev.holders_allocated,
        # Moving memory: where the scheduler believes it is, what a switch to the head waiter
        # would cost, and what the moves so far have shown.
        "resident_bytes": dev.resident,
        "switch_cost_s": round(dev.switch_seconds, 3),
        # Idle gaps: what lending the holder's gap to the head waiter and back would move, and
        # whose gap is lent now (null: none), until when, and to whom.
        "loan_cost_s": round(dev.loan_seconds, 3),
        # Before moves have shown the rates, switches and loans are expected to move at this
        # (from the PCIe link NVML names; null: the low defaults).
        "link_prior_gbps": round(dev.link_prior_bps / 1e9, 2) if dev.link_prior_bps else None,
        "loan": {"lender": dev.lender, "left_s": round(dev.loan_left_s, 3),
                 "borrowers": dev.borrowers} if dev.lender is not None else None,
        "evicting": dev.evicting,
        "idle_hints_ms": {str(cid): ms for cid, ms in dev.idle_hints_ms.items()},
        # Shares: how long each holder has held in this grant and its quantum, and why the
        # last hold ended.
        "slices_s": {str(cid): round(held, 3) for cid, held in dev.slices.items()},
        "turns_s": {str(cid): round(turn, 3) for cid, turn in dev.turns.items()},
        "last_drop": {"client": last[0], "reason": last[1]} if last else None,
        # Which stage of the policy's pipeline decided what, in its words: each holder's grant
        # (or drop), each waiter's reason to wait, and the last drop.
        "decisions": {
            "clients": {str(cid): _decision(decision) for cid, decision in dev.decisions.items()},
            "last_drop": _decision(dev.last_drop) if dev.last_drop else None},
    })
    if dev.link is not None:  # a device that has seen moves (kept short for the others)
        entry["move_rates"] = dev.link.rates_view()
        entry["moves"] = dev.link.moves_view()
    return entry


def _decision(decision: Decision) -> dict:
    return {"stage": decision.stage, "decision": str(decision)}


def _client_entry(client: ClientSnapshot) -> dict:
    who = client.registration
    return {
        "id": who.id,
        "pid": who.pid,
        "uid": who.uid,
        "name": who.name,
        "device": client.device,
        "gpu_uuid": client.gpu_uuid or None,
        "pod": who.pod,
        "namespace": who.namespace,
        # Its Kubernetes container, and whether the node or the program itself named its pod.
        "container": who.container or None,
        "identity_from": client.identity_from,
        "node": _node_entry(client.node),
        # Its container's units on its GPU, shared with the clients in `clients`.
        "budget": _budget_entry(client.units, client.sharing, client.others_allocated),
        "state": client.state,
        "hold_time_s": round(client.hold_time, 3),
        "waits": client.waits,
        "wait_time_s": round(client.wait_time, 3),
        "allocated_bytes": sum(client.allocated.values()),
        "resident_bytes": client.resident,
        "connected_since": round(who.connected_since, 3),
        "revocations": client.revocations,
        "revoked": client.revoked,
        "gid": who.gid,
        "unified_memory": bool(who.flags & REG_UNIFIED_MEMORY),
        "label": client.label,
        "weight": client.terms.weight,
        "gpu_limit": client.terms.gpu_limit,
        "memory_limit": client.terms.memory_limit,
        "sm_share": client.terms.sm_share,
        "mps_priority": client.terms.mps_priority.label,
        # Through the scheduler's MPS server; when not, why (null when it runs no MPS).
        "mps": client.mps,
        "mps_why": client.mps_why or None,
        "terms_from": {name: client.terms.source(name) for name in TERM_NAMES},
        # What gemsharectl gave it, and that it is not kept: null when nothing was given.
        "overrides": {"values": client.overrides, "lasts": OVERRIDES_LAST}
        if client.overrides else None,
        "usage_s": {str(d): round(seconds, 3) for d, seconds in client.usage.items()},
        "gaps_s": {str(d): round(seconds, 3) for d, seconds in client.gaps.items()},
        "allocated_by_device": {str(d): b for d, b in client.allocated.items()},
        "gang": client.gang or None,
        # Every device it holds or waits for: a program may use several GPUs.
        "devices": {"holding": client.holding, "waiting": client.waiting},
        # Checked claims: the devices where it is throttled for taking the GPU back at once,
        # and why its last memory report there was refused (docs/security.md).
        "throttled": client.throttled,
        "memory_refused": {str(d): why for d, why in client.refused.items()},
        # Staging memory it was told to prepare, by device (its share of the overflow).
        "staging_bytes": {str(d): size for d, size in client.staging.items()},
    }


def _node_entry(node: NodeIdentity | None) -> dict | None:
    if node is None:
        return None
    return {"container_id": node.container_id, "pod_uid": node.pod_uid,
            "units": [{"gpu_uuid": gpu.gpu_uuid, "memory_units": gpu.memory_units,
                       "memory_bytes": gpu.memory_bytes, "compute_units": gpu.compute_units}
                      for gpu in node.gpus],
            "problem": node.problem or None}


def _budget_entry(units: GpuUnits | None, sharing: list[int], others: int) -> dict | None:
    if units is None:
        return None
    return {"gpu_uuid": units.gpu_uuid, "memory_bytes": units.memory_bytes or None,
            "compute_units": units.compute_units or None, "clients": sharing,
            "others_allocated_bytes": others}


def _gang_entry(gang: GangSnapshot) -> dict:
    return {"name": gang.name, "uid": gang.uid, "size": gang.size,
            "world_size": gang.world_size, "state": gang.state,
            "members": [{"client": cid, "rank": rank} for cid, rank in gang.members.items()],
            "turn_devices": gang.turn_devices,
            "turn_left_s": round(gang.turn_left_s, 3) if gang.turn_left_s is not None else None}


def encoded_size(value) -> int:
    """Bytes `value` takes as a JSON payload on the wire."""
    return len(ControlReply(value).payload())


def fit_status(status: dict, limit: int) -> dict:
    """`status` as it is when it encodes within `limit` bytes; else trimmed, always the same
    way: the clients' per-device breakdowns go first, then the newest clients, then the highest
    devices, and a `truncated` object says what was left out."""
    if encoded_size(status) <= limit:
        return status
    clients = [{k: v for k, v in c.items() if k != "allocated_by_device"}
               for c in status["clients"]]
    devices = list(status["devices"])
    # The notice is sized with the largest counts it could carry, so filling it in cannot grow.
    notice = {"limit_bytes": limit, "allocated_by_device_omitted": True,
              "clients_omitted": len(clients), "devices_omitted": len(devices)}
    trimmed = {**status, "clients": clients, "devices": devices, "truncated": notice}
    excess = encoded_size(trimmed) - limit
    for items in (clients, devices):
        while excess > 0 and items:
            excess -= encoded_size(items.pop()) + 1  # and its comma
    # The last item of a list had no comma to free: at most a byte or two left to take.
    while encoded_size(trimmed) > limit and (clients or devices):
        (clients or devices).pop()
    notice["clients_omitted"] = len(status["clients"]) - len(clients)
    notice["devices_omitted"] = len(status["devices"]) - len(devices)
    return trimmed
