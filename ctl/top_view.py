"""One frame of `gemsharectl top`: who holds each device, who waits, and each client's recent
share of GPU time beside its memory, state and weight.

Fields are read with fallbacks, as in render.py, so an older or newer scheduler still draws.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from .render import (
    MISSING,
    human_bytes,
    human_duration,
    last_drop,
    local_time,
    mps_line,
    pod_of,
)

WARMING_UP = "warming up"
_STATE_STYLES = {"holding": "bold green", "waiting": "yellow", "idle": "dim"}


def _who(client_id, clients_by_id: dict) -> str:
    client = clients_by_id.get(client_id)
    if client is None:
        return f"#{client_id}"
    return f"#{client_id} {client.get('name') or '?'} (pid {client.get('pid', '?')})"


def share_text(share: float | None) -> Text:
    if share is None:
        return Text(WARMING_UP, style="dim")
    return Text(f"{share:.0%}", style="bold" if share >= 0.5 else "")


def _header(status: dict, socket: str, span_s: float, live: bool) -> Text:
    clients = status.get("clients") or []
    line = Text()
    line.append("gemshare-scheduler", style="bold")
    line.append(f" on {socket} at {local_time(status.get('time'), '%H:%M:%S')}\n")
    tq = status.get("tq")
    line.append(f"TQ {tq} s" if isinstance(tq, int) else f"TQ {MISSING}")
    line.append(f", anti-thrash {status.get('anti_thrash', MISSING)}, ")
    line.append(f"{len(clients)} client{'' if len(clients) == 1 else 's'}")
    if span_s > 0:
        line.append(f"; shares over the last {human_duration(span_s)}", style="dim")
    if live:
        line.append("; q quits", style="dim")
    return line


def devices_table(status: dict) -> Table:
    clients_by_id = {c.get("id"): c for c in status.get("clients") or [] if isinstance(c, dict)}
    table = Table(title="Devices", title_justify="left")
    for column in ("Device", "Holder", "Queue", "Last drop"):
        table.add_column(column)
    for device in status.get("devices") or []:
        if not isinstance(device, dict):
            continue
        holders = [_who(i, clients_by_id) for i in device.get("holders") or []]
        waiters = [_who(i, clients_by_id) for i in device.get("waiters") or []]
        table.add_row(str(device.get("index", MISSING)), "\n".join(holders) or "none",
                      "\n".join(waiters) or "none", last_drop(device, clients_by_id))
    return table


def _weight(client: dict) -> str:
    weight = client.get("weight")
    return f"{weight:g}" if isinstance(weight, (int, float)) and not isinstance(weight, bool) \
        else MISSING


def clients_table(status: dict, shares: dict) -> Table:
    """Busiest first: by share, then by id, so the rows stay put between frames."""
    clients = [c for c in status.get("clients") or [] if isinstance(c, dict)]
    clients.sort(key=lambda c: (-(shares.get(c.get("id")) or 0.0), str(c.get("id"))))
    table = Table(title="Clients", title_justify="left")
    for header, right in (("ID", True), ("PID", True), ("Name", False), ("Pod", False),
                          ("Dev", True), ("State", False), ("GPU share (1 min)", True),
                          ("Memory", True), ("Weight", True)):
        table.add_column(header, justify="right" if right else "left", no_wrap=header != "Name")
    for client in clients:
        state = str(client.get("state", MISSING))
        table.add_row(str(client.get("id", MISSING)), str(client.get("pid", MISSING)),
                      client.get("name") or MISSING, pod_of(client),
                      str(client.get("device", MISSING)),
                      Text(state, style=_STATE_STYLES.get(state, "")),
                      share_text(shares.get(client.get("id"))),
                      human_bytes(client.get("allocated_bytes")), _weight(client))
    return table


def top_view(status: dict, shares: dict, socket: str, *, span_s: float = 0.0,
             live: bool = False) -> Group:
    """Everything one frame shows. `shares` maps client id to a share or None (warming up)."""
    parts = [_header(status, socket, span_s, live)]
    mps = mps_line(status)
    if mps is not None:
        parts.append(mps)
    parts.append(devices_table(status))
    if status.get("clients"):
        parts.append(clients_table(status, shares))
    else:
        parts.append(Text("No clients connected.", style="dim"))
    return Group(*parts)
