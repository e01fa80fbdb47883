"""The STATUS object of docs/protocol.md, built from the policy core's state.

Required keys come first; extra keys sit beside them (gemsharectl ignores what it does not know).
"""

from __future__ import annotations

from .policy import Policy
from .protocol import REG_UNIFIED_MEMORY


def build_status(policy: Policy, now: float, wall: float, *, grace_ms: int,
                 gpus: list[dict] | None = None, extra: dict | None = None) -> dict:
    """`now` is the policy's clock, `wall` the Unix time; `gpus` comes from NVML when available."""
    by_index = {gpu["index"]: gpu for gpu in gpus or []}
    indices = set(by_index) | set(policy.devices)
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
