"""The scheduler's status object drawn as rich renderables for `gemsharectl status`.

Every field is read with a fallback so that a scheduler which adds or leaves out optional fields
still gets a readable table instead of a crash.
"""

from __future__ import annotations

import datetime as dt
import re

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


def local_time(unix_seconds, form: str = "%Y-%m-%d %H:%M:%S") -> str:
    if not isinstance(unix_seconds, (int, float)) or unix_seconds <= 0:
        return MISSING
    return dt.datetime.fromtimestamp(unix_seconds).strftime(form)


def _client_label(client_id, clients_by_id: dict) -> str:
    client = clients_by_id.get(client_id)
    if client is None:
        return f"#{client_id}"
    return f"#{client_id} {client.get('name') or '?'} (pid {client.get('pid', '?')})"


def short_source(source) -> str:
    """Where a value came from, short enough for a table: "" for a default, "rule 2" for a
    config rule, "config line 3" for a config setting (the file is named once, above)."""
    if not isinstance(source, str) or source == "default":
        return ""
    rule = re.match(r"config rule (\d+)", source)
    if rule:
        return f"rule {rule[1]}"
    line = re.match(r"config \(.*:(\d+)\)$", source)
    if line:
        return f"config line {line[1]}"
    return "config" if source.startswith("config") else source


def _setting(line: Text, label: str, value: str, source) -> None:
    line.append(f"{label} ")
    line.append(value, style="bold")
    if short_source(source):
        line.append(f" ({short_source(source)})", style="dim")
    line.append("   ")


def _summary(status: dict, socket: str) -> Text:
    clients = status.get("clients") or []
    sources = status.get("settings_from") if isinstance(status.get("settings_from"), dict) \
        else {}
    line = Text()
    line.append("gemshare-scheduler", style="bold")
    line.append(f" on {socket}\n")
    tq = status.get("tq")
    _setting(line, "TQ", f"{tq} s" if isinstance(tq, int) else MISSING, sources.get("tq"))
    _setting(line, "anti-thrash", str(status.get("anti_thrash", MISSING)),
             sources.get("anti_thrash"))
    if isinstance(status.get("min_slice_ms"), int):
        _setting(line, "min slice", f"{status['min_slice_ms']} ms", sources.get("min_slice_ms"))
    grace_ms = status.get("grace_ms")
    if isinstance(grace_ms, (int, float)):
        _setting(line, "grace", f"{grace_ms / 1000:g} s", sources.get("grace_ms"))
    line.append(f"{len(clients)} client{'' if len(clients) == 1 else 's'}")
    viewers = status.get("view_only")
    if isinstance(viewers, dict) and isinstance(viewers.get("registered"), int):
        # Never in the clients table, yet they hold slots: said, with their own cap.
        line.append(f", view-only {viewers['registered']}/{viewers.get('max', MISSING)}",
                    style="dim" if not viewers["registered"] else "")
    return line


def config_lines(status: dict) -> Text | None:
    """The config file in force and the settings kept across restarts, when there is anything
    to say about them."""
    lines = []
    config = status.get("config")
    if isinstance(config, dict) and config.get("path"):
        rules = config.get("rules", 0)
        if config.get("loaded"):
            words = (f"Config {config['path']}: {rules} rule{'' if rules == 1 else 's'}, "
                     f"loaded {local_time(config.get('loaded_at'))}")
        else:
            words = f"Config {config['path']}: none in force"
        lines.append(Text(words, style="dim"))
        if config.get("problem"):
            lines.append(Text(f"Config not reloaded: {config['problem']}", style="yellow"))
    mps = mps_line(status)
    if mps is not None:
        lines.append(mps)
    kept = status.get("runtime_settings")
    if isinstance(kept, dict) and kept.get("persistent") is False and kept.get("problem"):
        lines.append(Text("Settings changed with gemsharectl last only until the scheduler "
                          f"stops: {kept['problem']}", style="yellow"))
    return Text("\n").join(lines) if lines else None


def mps_line(status: dict) -> Text | None:
    """Where the MPS control daemon stands, when the scheduler runs one."""
    mps = status.get("mps")
    if not isinstance(mps, dict) or not mps.get("enabled"):
        return None
    if not mps.get("running"):
        return Text(f"MPS: not running ({mps.get('problem') or 'no answer'}): programs start "
                    "as plain contexts", style="yellow")
    clients, user = mps.get("clients", 0), mps.get("user")
    whose = f", serving uid {user}" if user is not None else ""
    count = mps.get("restarts") or 0
    restarts = f", started again {count} time{'' if count == 1 else 's'}" if count else ""
    adopted = " (adopted)" if mps.get("adopted") else ""
    return Text(f"MPS: control daemon at {mps.get('pipe_directory')}{adopted}: {clients} "
                f"client{'' if clients == 1 else 's'} through it{whose}{restarts}", style="dim")


def through_mps(client: dict) -> str:
    """Whether the client goes through MPS: "yes", "yes 30%" (its SM share), "yes low" or
    "yes 30% low" (its priority, when below normal), or "no"."""
    if client.get("mps") is True:
        share = client.get("sm_share")
        words = ("yes", f"{share}%" if isinstance(share, int) else "",
                 "low" if client.get("mps_priority") == "low" else "")
        return " ".join(word for word in words if word)
    return "no" if client.get("mps_why") else MISSING


def _holder_label(device: dict, client_id, clients_by_id: dict) -> str:
    label = _client_label(client_id, clients_by_id)
    # How long it has held in this grant, of the turn it was given (shorter for a light weight).
    held = (device.get("slices_s") or {}).get(str(client_id))
    turn = (device.get("turns_s") or {}).get(str(client_id))
    if isinstance(held, (int, float)):
        of = f" of {human_duration(turn)}" if isinstance(turn, (int, float)) else ""
        label = f"{label}, {human_duration(held)}{of}"
    # `dropping` names each holder asked to drop; older schedulers only say whether one was.
    dropping = device.get("dropping")
    asked = client_id in dropping if isinstance(dropping, list) else device.get("drop_pending")
    return _decided(device, client_id, f"{label}, asked to drop" if asked else label)


def _decisions(device: dict) -> dict:
    decisions = device.get("decisions")
    return decisions if isinstance(decisions, dict) else {}


def _words(decision) -> str:
    """A decision's words ("granted: under its share"); "" where there is none or it is not
    one (an older scheduler's status has none)."""
    words = decision.get("decision") if isinstance(decision, dict) else None
    return words if isinstance(words, str) else ""


def _decided(device: dict, client_id, label: str) -> str:
    """A holder's or waiter's label with the decision that stands for it, where status says,
    on a line of its own (so that the column stays narrow)."""
    clients = _decisions(device).get("clients")
    words = _words(clients.get(str(client_id))) if isinstance(clients, dict) else ""
    return f"{label}\n  {words}" if words else label


def _waiter_label(device: dict, client_id, clients_by_id: dict) -> str:
    return _decided(device, client_id, _client_label(client_id, clients_by_id))


def last_drop(device: dict, clients_by_id: dict) -> str:
    """Whose hold ended last on the device, and why (with the drop's decision, where a drop
    ended it)."""
    drop = device.get("last_drop")
    if not isinstance(drop, dict):
        return MISSING
    words = _words(_decisions(device).get("last_drop"))
    return f"{_client_label(drop.get('client'), clients_by_id)}: {drop.get('reason', '?')}" + \
        (f"\n  {words}" if words else "")


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
    measured = isinstance(rates, dict) and rates.get("measured")
    prior = device.get("link_prior_gbps")
    if isinstance(prior, (int, float)) and not measured:
        lines.append(f"{prior} GB/s each way expected (PCIe link), until moves show the rates")
    elif isinstance(rates, dict):
        how = "measured" if measured else "assumed"
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
    drops = any(isinstance(device.get("last_drop"), dict) for device in devices)
    table = Table(title="Devices", title_justify="left")
    for column in ("Device", "Name", "Memory used / total", "Allocated by clients",
                   *(("Held + reserves / capacity",) if auto else ()), "Holders",
                   "Waiting, in order", *(("Last drop",) if drops else ()), "Moving memory"):
        table.add_column(column)
    for device in devices:
        used, total = device.get("memory_used_bytes"), device.get("memory_total_bytes")
        memory = MISSING if total is None else f"{human_bytes(used)} / {human_bytes(total)}"
        holders = [_holder_label(device, i, clients_by_id) for i in device.get("holders") or []]
        waiters = [_waiter_label(device, i, clients_by_id) for i in device.get("waiters") or []]
        table.add_row(str(device.get("index", MISSING)), device.get("name") or MISSING, memory,
                      human_bytes(device.get("allocated_bytes")),
                      *((auto_budget(device),) if auto else ()),
                      "\n".join(holders) or "none", "\n".join(waiters) or "none",
                      *((last_drop(device, clients_by_id),) if drops else ()), moving(device))
    return table


def gangs_table(status: dict) -> Table | None:
    """One row per distributed job whose processes are scheduled together."""
    gangs = [gang for gang in status.get("gangs") or [] if isinstance(gang, dict)]
    if not gangs:
        return None
    clients_by_id = {c.get("id"): c for c in status.get("clients") or []}
    table = Table(title="Gangs", title_justify="left")
    for column in ("Job", "UID", "State", "Members (rank)", "Turn"):
        table.add_column(column)
    for gang in gangs:
        members = [f"{_client_label(m.get('client'), clients_by_id)} ({m.get('rank', MISSING)})"
                   for m in gang.get("members") or [] if isinstance(m, dict)]
        devices = gang.get("turn_devices")
        turn = "between turns" if devices is None else \
            f"devices {', '.join(map(str, devices))}, {human_duration(gang.get('turn_left_s'))} left"
        table.add_row(str(gang.get("name", MISSING)), str(gang.get("uid", MISSING)),
                      f"{gang.get('state', MISSING)}, {len(members)} of {gang.get('size', '?')}",
                      "\n".join(members) or "none", turn)
    return table


def _text(key):
    return lambda client: str(client.get(key, MISSING))


def pod_of(client: dict) -> str:
    """Its pod as namespace/pod, with its container where the node named it:
    "ml/train-0 (worker)"."""
    pod = client.get("pod")
    if not pod:
        return MISSING
    container = client.get("container")
    inside = f" ({container})" if isinstance(container, str) and container else ""
    return f"{client.get('namespace') or 'default'}/{pod}{inside}"


def _number(value) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else MISSING


def limits(client: dict) -> str:
    """Its GPU time and memory limits: "50% GPU, 16.0 GiB"; a memory budget its container's
    programs share says by how many: "8.0 GiB shared by 3"; "-" with none."""
    parts = []
    if isinstance(client.get("gpu_limit"), (int, float)):
        parts.append(f"{client['gpu_limit']:.0%} GPU")
    if isinstance(client.get("memory_limit"), int):
        budget = client.get("budget") if isinstance(client.get("budget"), dict) else {}
        sharing = budget.get("clients") if isinstance(budget.get("clients"), list) else []
        shared = f" shared by {len(sharing)}" if len(sharing) > 1 and \
            client.get("memory_limit") == budget.get("memory_bytes") else ""
        parts.append(human_bytes(client["memory_limit"]) + shared)
    return ", ".join(parts) or MISSING


def terms_from(client: dict) -> str:
    """Where its terms that are not defaults come from: "rule 2", "gemsharectl"."""
    sources = client.get("terms_from")
    if not isinstance(sources, dict):
        return MISSING
    named = dict.fromkeys(short_source(source) for source in sources.values())
    return ", ".join(name for name in named if name) or MISSING


def usage(client: dict) -> str:
    """Its recent lock time, all devices together, as the scheduler weighs shares by it."""
    spent = client.get("usage_s")
    if not isinstance(spent, dict):
        return MISSING
    return human_duration(sum(v for v in spent.values() if isinstance(v, (int, float))))


def overrides_note(clients: list) -> Text | None:
    """How long terms given with `gemsharectl client` stand, when any client has some: they are
    kept nowhere, unlike settings changed with gemsharectl."""
    lasts = next((c["overrides"].get("lasts") for c in clients
                  if isinstance(c.get("overrides"), dict)), None)
    if not isinstance(lasts, str):
        return None
    return Text(f"Terms from gemsharectl last {lasts}.", style="dim")


def _state(client: dict) -> Text:
    """Its state, and the devices it holds or waits for when they are not just its own one."""
    state = str(client.get("state", MISSING))
    devices = client.get("devices") if isinstance(client.get("devices"), dict) else {}
    which = devices.get(state if state in ("holding", "waiting") else "", [])
    shown = f" {', '.join(map(str, which))}" if which and which != [client.get("device")] else ""
    return Text(state + shown, style=_STATE_STYLES.get(state, ""))


# (header, right-aligned, cell of one client)
CLIENT_COLUMNS = (
    ("ID", True, _text("id")),
    ("PID", True, _text("pid")),
    ("UID", True, _text("uid")),
    ("Name", False, lambda c: c.get("name") or MISSING),
    ("Label", False, lambda c: c.get("label") or MISSING),
    ("Pod", False, pod_of),
    ("Dev", True, _text("device")),
    ("Gang", False, lambda c: c.get("gang") or MISSING),
    ("State", False, _state),
    ("Held", True, lambda c: human_duration(c.get("hold_time_s"))),
    ("Waits", True, _text("waits")),
    ("Waited", True, lambda c: human_duration(c.get("wait_time_s"))),
    ("Allocated", True, lambda c: human_bytes(c.get("allocated_bytes"))),
    ("Weight", True, lambda c: _number(c.get("weight"))),
    ("MPS", False, through_mps),
    ("Limits", False, limits),
    ("Terms from", False, terms_from),
    ("Usage", True, usage),
    ("Connected since", False, lambda c: local_time(c.get("connected_since"))),
    ("Revoked", True, _text("revocations")),
)
# What a narrow terminal loses first; the rest always stays.
DROPPABLE_COLUMNS = ("Connected since", "UID", "Revoked", "Waits", "Pod", "Terms from", "Usage",
                     "Gang", "Label")
# Columns left out when no client has anything to show in them.
SPARSE_COLUMNS = {"Pod": lambda c: c.get("pod"), "Gang": lambda c: c.get("gang"),
                  "Label": lambda c: c.get("label"), "Limits": lambda c: limits(c) != MISSING,
                  "Terms from": lambda c: terms_from(c) != MISSING,
                  "Weight": lambda c: "weight" in c, "Usage": lambda c: "usage_s" in c,
                  "MPS": lambda c: through_mps(c) != MISSING}


def clients_table(status: dict, omit=()) -> Table:
    clients = status.get("clients") or []
    omit = {*omit, *(header for header, shows in SPARSE_COLUMNS.items()
                     if not any(shows(c) for c in clients))}
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


def unregistered_lines(status: dict) -> Text | None:
    """The processes that use a GPU without the scheduler, one line each."""
    found = status.get("unregistered")
    if not isinstance(found, list) or not found:
        return None
    lines = [Text(f"Unregistered GPU user: pid {entry.get('pid', MISSING)} "
                  f"({entry.get('name') or '?'}, uid {entry.get('uid', MISSING)}) on device "
                  f"{entry.get('device', MISSING)}, {human_bytes(entry.get('used_bytes'))} per "
                  "NVML: not scheduled", style="yellow")
             for entry in found if isinstance(entry, dict)]
    return Text("\n").join(lines) if lines else None


def staging_line(status: dict) -> Text | None:
    """What the programs were told to prepare of host memory for moves off their GPUs, against
    the node's staging budget; None while nobody was (older schedulers say none of it)."""
    staging = status.get("staging")
    if not isinstance(staging, dict) or not staging.get("told_bytes"):
        return None
    budget = staging.get("budget_bytes")
    words = f"Staging memory: {human_bytes(staging['told_bytes'])} told to prepare"
    if isinstance(budget, int):
        limit = staging.get("limit_bytes")
        whose = "--staging-max-mib" if isinstance(limit, int) and limit <= budget else \
            "the host's free memory"
        words += f", within {human_bytes(budget)} ({whose})"
    fraction = staging.get("fraction")
    if isinstance(fraction, (int, float)) and fraction < 1:
        return Text(f"{words}: each program {round(fraction * 100)}% of its share, the driver "
                    "migrates the rest", style="yellow")
    return Text(words)


def unheld_lines(status: dict) -> Text | None:
    """Per GPU, what the node's containers hold in memory and compute units, and what that
    leaves to containers without units of a kind; None where no units are held (or the
    scheduler is older)."""
    found = status.get("unheld")
    if not isinstance(found, list) or not found:
        return None
    lines = []
    for entry in found:
        if not isinstance(entry, dict):
            continue
        device = entry.get("device")
        words = [f"Units on {'device ' + str(device) if isinstance(device, int) else 'GPU'} "
                 f"({entry.get('gpu_uuid') or '?'}), {entry.get('containers', MISSING)} "
                 "containers:"]
        memory, compute = entry.get("memory_unheld_bytes"), entry.get("compute_unheld_units")
        if entry.get("memory_held_bytes"):
            words.append(f"memory {human_bytes(entry['memory_held_bytes'])} held, " +
                         (f"{human_bytes(memory)} left" if isinstance(memory, int) else
                          "GPU memory unknown") + ";")
        if entry.get("compute_held_units"):
            words.append(f"compute {entry['compute_held_units']} held, "
                         f"{compute if isinstance(compute, int) else MISSING} left;")
        lines.append(Text(" ".join(words).rstrip(";") +
                          " (what containers without units of a kind share)"))
    return Text("\n").join(lines) if lines else None


def status_view(console: Console, status: dict, socket: str) -> Group:
    """Everything `gemsharectl status` prints, top to bottom."""
    parts = [_summary(status, socket)]
    about_config = config_lines(status)
    if about_config is not None:
        parts.append(about_config)
    for lines in (unregistered_lines(status), staging_line(status), unheld_lines(status)):
        if lines is not None:
            parts.append(lines)
    note = truncation_note(status)
    if note is not None:
        parts.append(note)
    for table in (devices_table(status), gangs_table(status)):
        if table is not None:
            parts.append(table)
    if status.get("clients"):
        parts.append(fitted_clients_table(console, status))
        temporary = overrides_note(status["clients"])
        if temporary is not None:
            parts.append(temporary)
    else:
        parts.append(Text("No clients connected.", style="dim"))
    return Group(*parts)


START_TERMS = ("sm_share", "mps", "mps_priority")


def budget_line(client: dict) -> str | None:
    """What its container's units give its programs together, where it has some."""
    budget = client.get("budget")
    if not isinstance(budget, dict):
        return None
    sharing = budget.get("clients") if isinstance(budget.get("clients"), list) else []
    parts = [f"{human_bytes(budget['memory_bytes'])} of memory"
             if isinstance(budget.get("memory_bytes"), int) else "",
             f"{budget['compute_units']} compute units"
             if isinstance(budget.get("compute_units"), int) else ""]
    others = [f"#{cid}" for cid in sharing if cid != client.get("id")]
    beside = f", shared with {', '.join(others)} (who have " \
             f"{human_bytes(budget.get('others_allocated_bytes'))} allocated)" if others else ""
    return f"container budget on {budget.get('gpu_uuid') or 'its GPU'}: " \
           f"{' and '.join(part for part in parts if part) or 'no units'}{beside}"


def terms_view(client: dict) -> Text:
    """One client's terms and where each comes from, for `gemsharectl client PID`."""
    sources = client.get("terms_from") if isinstance(client.get("terms_from"), dict) else {}
    text = Text()
    text.append(f"{_client_label(client.get('id'), {client.get('id'): client})}", style="bold")
    if client.get("label"):
        text.append(f", label {client['label']}")
    if client.get("pod"):
        text.append(f", pod {pod_of(client)}")
        if client.get("identity_from") == "node":
            text.append(" (from the node)", style="dim")
    elif client.get("identity_from") == "node: not named yet":
        text.append(", pod not named by the node yet (the defaults until it is)", style="dim")
    elif client.get("identity_from") == "node: in no pod":
        text.append(", in no pod (the node says)", style="dim")
    gpu, memory = client.get("gpu_limit"), client.get("memory_limit")
    for name, shown in (("weight", _number(client.get("weight"))),
                        ("gpu_limit", f"{gpu:.0%} of the GPU's time"
                         if isinstance(gpu, (int, float)) else "none"),
                        ("memory_limit", human_bytes(memory) if isinstance(memory, int)
                         else "none"),
                        ("sm_share", f"{client.get('sm_share')}% of the SMs"
                         if isinstance(client.get("sm_share"), int) else "all"),
                        ("mps", "yes" if client.get("mps") else
                         f"no ({client['mps_why']})" if client.get("mps_why") else "not run"),
                        ("mps_priority", str(client.get("mps_priority")))):
        if name in START_TERMS and name not in client:
            continue  # a scheduler without MPS terms
        text.append(f"\n  {name}: {shown}")
        text.append(f" ({sources.get(name, 'default')})", style="dim")
    budget = budget_line(client)
    if budget is not None:
        text.append(f"\n  {budget}")
    temporary = overrides_note([client])
    if temporary is not None:
        text.append("\n")
        text.append(temporary)
    return text
