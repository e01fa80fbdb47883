"""The STATUS object of docs/protocol.md, built from the policy core's state.

Required keys come first; extra keys sit beside them (gemsharectl ignores what it does not know).
`fit_status` trims it to what one frame can carry.
"""

from __future__ import annotations

from .policy import Policy
from .protocol import REG_UNIFIED_MEMORY, ControlReply


def build_status(policy: Policy, now: float, wall: float, *, grace_ms: int,
                 gpus: list[dict] | None = None, extra: dict | None = None) -> dict:
    """`now` is the policy's clock, `wall` the Unix time; `gpus` comes from NVML when available."""
    by_index = {gpu["index"]: gpu for gpu in gpus or []}
    indices = set(by_index) | set(policy.devices) | set(policy.links)
    for client in policy.clients.values():
        indices |= {client.device, *client.allocated}
    devices = []
    for index in sorted(indices):
        dev = policy.devices.get(index)
        entry = {"index": index,
                 "holders": list(dev.holders) if dev else [],
                 "waiters": list(dev.waiters) if dev else []}
        entry.update({k: v for k, v in by_index.get(index, {}).items() if k != "index"})
        entry["dropping"] = [cid for cid, hold in dev.holders.items()
                             if hold.dropped_at is not None] if dev else []
        entry["drop_pending"] = bool(entry["dropping"])
        entry["allocated_bytes"] = sum(c.allocated.get(index, 0)
                                       for c in policy.clients.values())
        # What the clients' drivers say the device holds; useful where NVML is missing.
        entry["reported_total_bytes"] = max((c.device_total.get(index, 0)
                                             for c in policy.clients.values()), default=0)
        # What mode auto decides with: capacity (None when unknown), reserve per holder, and
        # the memory of those holding now.
        entry["capacity_bytes"], entry["capacity_source"] = policy.capacity(index)
        entry["context_reserve_bytes"] = policy.reserve
        entry["holders_allocated_bytes"] = policy.holders_memory(index)
        # Moving memory: where the scheduler believes it is, what a switch to the head waiter
        # would cost, and what the moves so far have shown.
        link = policy.link(index)
        entry["resident_bytes"] = policy.residency.total(index)
        entry["switch_cost_s"] = round(policy.switch_seconds(index), 3)
        entry["evicting"] = sorted(dev.evictions) if dev else []
        entry["idle_hints_ms"] = {str(cid): hold.idle_hint_ms
                                  for cid, hold in dev.holders.items() if hold.idle_hint_ms} \
            if dev else {}
        if index in policy.links:  # a device that has seen moves (kept short for the others)
            entry["move_rates"] = link.rates_view()
            entry["moves"] = link.moves_view()
        devices.append(entry)

    clients = []
    for cid, client in sorted(policy.clients.items()):
        clients.append({
            "id": cid,
            "pid": client.pid,
            "uid": client.uid,
            "name": client.name,
            "device": client.device,
            "gpu_uuid": client.gpu_uuid or None,
            "pod": client.pod,
            "namespace": client.namespace,
            "state": policy.state_of(cid),
            "hold_time_s": round(client.hold_time + policy.running_hold_time(cid, now), 3),
            "waits": client.waits,
            "wait_time_s": round(client.wait_time + policy.running_wait_time(cid, now), 3),
            "allocated_bytes": sum(client.allocated.values()),
            "resident_bytes": policy.residency.of(client.device, cid),
            "connected_since": round(client.connected_since, 3),
            "revocations": client.revocations,
            "revoked": client.revoked,
            "gid": client.gid,
            "unified_memory": bool(client.flags & REG_UNIFIED_MEMORY),
            "allocated_by_device": {str(d): b for d, b in sorted(client.allocated.items())},
        })
    status = {
        "tq": policy.tq,
        "anti_thrash": policy.mode.label,
        "grace_ms": grace_ms,
        "devices": devices,
        "clients": clients,
        "max_clients": policy.max_clients,
        "revocations": policy.revocations,
        "nvml": gpus is not None,
        "time": round(wall, 3),
    }
    status.update(extra or {})
    return status


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
