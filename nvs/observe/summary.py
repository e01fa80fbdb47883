"""The one-line status summary the scheduler logs on SIGUSR1 or SIGUSR2: what an operator
needs to see at a glance in the journal without gemsharectl (which may not reach a scheduler in
trouble)."""

from __future__ import annotations


def summary_line(status: dict) -> str:
    """`status` is the object of a status reply (status.py)."""
    devices = status.get("devices", [])
    held = ", ".join(
        f"GPU {dev['index']}: {len(dev['holders'])} holding, {len(dev['waiters'])} waiting"
        for dev in devices) or "no devices in use"
    return (f"status: pid {status.get('pid')}, up {status.get('uptime_s', 0):.0f} s, "
            f"{len(status.get('clients', []))} of {status.get('max_clients')} clients, "
            f"{status.get('connections')} connections, tq {status.get('tq')} s, anti-thrash "
            f"{status.get('anti_thrash')}, {status.get('revocations')} revocations; {held}")
