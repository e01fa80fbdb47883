"""The scheduler's status object drawn as rich renderables for `gemsharectl status`.

Every field is read with a fallback so that a scheduler which adds or leaves out optional fields
still gets a readable table instead of a crash.
"""

from __future__ import annotations

import datetime as dt

from rich.console import Console, Group
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

MISSING = "-"
_STATE_STYLES = {"holding": "bold green", "waiting": "yellow", "idle": "dim"}


def human_bytes(count) -> str:
    """Bytes in binary units: 0 B, 512 B, 1.5 KiB, 40.0 GiB."""
    if not isinstance(count, (int, float)) or count < 0:
        return MISSING
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable: the loop returns at TiB")


def human_duration(seconds) -> str:
    """A span short enough to scan: 0.4 s, 12.0 s, 5m 03s, 2h 05m, 3d 04h."""
    if not isinstance(seconds, (int, float)) or seconds < 0:
        return MISSING
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    minutes, secs = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s"


def local_time(unix_seconds) -> str:
    if not isinstance(unix_seconds, (int, float)) or unix_seconds <= 0:
        return MISSING
    return dt.datetime.fromtimestamp(unix_seconds).strftime("%Y-%m-%d %H:%M:%S")


def _client_label(client_id, clients_by_id: dict) -> str:
    client = clients_by_id.get(client_id)
    if client is None:
        return f"#{client_id}"
    return f"#{client_id} {client.get('name') or '?'} (pid {client.get('pid', '?')})"


def _summary(status: dict, socket: str) -> Text:
    clients = status.get("clients") or []
    line = Text()
    line.append("gemshare-scheduler", style="bold")
    line.append(f" on {socket}\n")
    tq = status.get("tq")
    line.append("TQ ")
    line.append(f"{tq} s" if isinstance(tq, int) else MISSING, style="bold")
    line.append("   anti-thrash ")
    line.append(str(status.get("anti_thrash", MISSING)), style="bold")
    grace_ms = status.get("grace_ms")
    if isinstance(grace_ms, (int, float)):
        line.append(f"   grace {grace_ms / 1000:g} s")
    line.append(f"   {len(clients)} client{'' if len(clients) == 1 else 's'}")
    return line


def _holder_label(device: dict, client_id, clients_by_id: dict) -> str:
    label = _client_label(client_id, clients_by_id)
    # `dropping` names each holder asked to drop; older schedulers only say whether one was.
    dropping = device.get("dropping")
    asked = client_id in dropping if isinstance(dropping, list) else device.get("drop_pending")
    return f"{label}, asked to drop" if asked else label


def auto_budget(device: dict) -> str:
    """What mode auto decides with: the holders' memory, a reserve each, and the capacity."""
    capacity = device.get("capacity_bytes")
    if not isinstance(capacity, int):
        return "capacity unknown: one holder"
    holders = len(device.get("holders") or [])
    reserve = device.get("context_reserve_bytes")
    source = device.get("capacity_source")
    return (f"{human_bytes(device.get('holders_allocated_bytes'))} + {holders} x "
            f"{human_bytes(reserve)} / {human_bytes(capacity)}"
            + (f" ({source})" if source else ""))


def moving(device: dict) -> str:
    """Memory the scheduler believes is on the device, what a switch would move, and the rates
    the moves so far have shown (older schedulers say none of it)."""
    lines = []
    if isinstance(device.get("resident_bytes"), int):
        lines.append(f"{human_bytes(device['resident_bytes'])} on the device")
    if isinstance(device.get("switch_cost_s"), (int, float)) and device["switch_cost_s"] > 0:
        lines.append(f"switch costs {device['switch_cost_s']:.2f} s")
    rates, moves = device.get("move_rates"), device.get("moves")
    if isinstance(rates, dict):
        how = "measured" if rates.get("measured") else "assumed"
        lines.append(f"out {rates.get('to_host_gbps')} GB/s, in {rates.get('to_device_gbps')} "
                     f"GB/s ({how})")
    if isinstance(moves, dict):
        out, back = moves.get("to_host") or {}, moves.get("to_device") or {}
        lines.append(f"moved out {out.get('count', 0)}x {human_bytes(out.get('bytes'))}, "
                     f"in {back.get('count', 0)}x {human_bytes(back.get('bytes'))}")
    return "\n".join(lines) or MISSING


def devices_table(status: dict) -> Table | None:
    devices = status.get("devices") or []
    if not devices:
        return None
    clients_by_id = {c.get("id"): c for c in status.get("clients") or []}
    auto = status.get("anti_thrash") == "auto"
    table = Table(title="Devices", title_justify="left")
    for column in ("Device", "Name", "Memory used / total", "Allocated by clients",
                   *(("Held + reserves / capacity",) if auto else ()), "Holders",
                   "Waiting, in order", "Moving memory"):
        table.add_column(column)
    for device in devices:
        used, total = device.get("memory_used_bytes"), device.get("memory_total_bytes")
        memory = MISSING if total is None else f"{human_bytes(used)} / {human_bytes(total)}"
        holders = [_holder_label(device, i, clients_by_id) for i in device.get("holders") or []]
        waiters = [_client_label(i, clients_by_id) for i in device.get("waiters") or []]
        table.add_row(str(device.get("index", MISSING)), device.get("name") or MISSING, memory,
                      human_bytes(device.get("allocated_bytes")),
                      *((auto_budget(device),) if auto else ()),
                      "\n".join(holders) or "none", "\n".join(waiters) or "none",
                      moving(device))
    return table


def _text(key):
    return lambda client: str(client.get(key, MISSING))


def _pod(client: dict) -> str:
    pod = client.get("pod")
    return f"{client.get('namespace') or 'default'}/{pod}" if pod else MISSING


def _state(client: dict) -> Text:
    state = str(client.get("state", MISSING))
    return Text(state, style=_STATE_STYLES.get(state, ""))


# (header, right-aligned, cell of one client)
CLIENT_COLUMNS = (
    ("ID", True, _text("id")),
    ("PID", True, _text("pid")),
    ("UID", True, _text("uid")),
    ("Name", False, lambda c: c.get("name") or MISSING),
    ("Pod", False, _pod),
    ("Dev", True, _text("device")),
    ("State", False, _state),
    ("Held", True, lambda c: human_duration(c.get("hold_time_s"))),
    ("Waits", True, _text("waits")),
    ("Waited", True, lambda c: human_duration(c.get("wait_time_s"))),
    ("Allocated", True, lambda c: human_bytes(c.get("allocated_bytes"))),
    ("Connected since", False, lambda c: local_time(c.get("connected_since"))),
    ("Revoked", True, _text("revocations")),
)
# What a narrow terminal loses first; the rest always stays.
DROPPABLE_COLUMNS = ("Connected since", "UID", "Revoked", "Waits", "Pod")


def clients_table(status: dict, omit=()) -> Table:
    clients = status.get("clients") or []
    if not any(c.get("pod") for c in clients):
        omit = {*omit, "Pod"}
    columns = [column for column in CLIENT_COLUMNS if column[0] not in omit]
    table = Table(title="Clients", title_justify="left")
    for header, right, _ in columns:
        wraps = header == "Name"  # the one column that may wrap; it keeps room for a few letters
        table.add_column(header, justify="right" if right else "left", no_wrap=not wraps,
                         min_width=8 if wraps else None)
    for client in clients:
        table.add_row(*(cell(client) for _, _, cell in columns))
    return table


def fitted_clients_table(console: Console, status: dict) -> Table:
    """The clients table, less the droppable columns it needs to lose to fit the console."""
    omit: list[str] = []
    table = clients_table(status)
    unbounded = console.options.update_width(10_000)  # a table's natural width, unsqueezed
    for column in DROPPABLE_COLUMNS:
        if Measurement.get(console, unbounded, table).maximum <= console.width:
            break
        omit.append(column)
        table = clients_table(status, omit)
    return table


def truncation_note(status: dict) -> Text | None:
    """One line when the scheduler trimmed the status to fit its reply in one frame."""
    trimmed = status.get("truncated")
    if not isinstance(trimmed, dict):
        return None
    left_out = [f"{count} {what}{'' if count == 1 else 's'}"
                for what, key in (("client", "clients_omitted"), ("device", "devices_omitted"))
                if isinstance(count := trimmed.get(key), int) and count > 0]
    if trimmed.get("allocated_by_device_omitted"):
        left_out.append("per-device memory of each client")
    return Text(f"Status trimmed to fit one reply: not shown: {', '.join(left_out) or 'some'}.",
                style="yellow")


def status_view(console: Console, status: dict, socket: str) -> Group:
    """Everything `gemsharectl status` prints, top to bottom."""
    parts = [_summary(status, socket)]
    note = truncation_note(status)
    if note is not None:
        parts.append(note)
    devices = devices_table(status)
    if devices is not None:
        parts.append(devices)
    if status.get("clients"):
        parts.append(fitted_clients_table(console, status))
    else:
        parts.append(Text("No clients connected.", style="dim"))
    return Group(*parts)
