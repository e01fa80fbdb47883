"""bench-gpu part `oversub`: two programs whose memory does not fit on the card together.

Each scenario runs two copies of bench/gpu/oversub_pass.py: one after the other with no layer,
then together under libnvs.so with a fresh scheduler in mode `on`, then in mode `auto`. The card
is never really oversubscribed: the scheduler's --capacity-mib makes it act as if the card held
only that much, so each handoff moves memory as on a full card of that size, while the pair stays
within half the real card's free memory (it may be shared with others).

Four scenarios: compute-bound, half busy (0.5 s of CPU time per pass), and short passes (0.18 s
on an H100) with 0.2 s gaps, too short to lend, or with 1 s gaps, where the scheduler should lend
each program's gaps to the other (docs/scheduling.md, "Idle gaps").

Environment: OVERSUB_GIB (each program's GiB, default 16), OVERSUB_PASSES (default 20),
OVERSUB_CAPACITY_MIB (the capacity the scheduler acts on, default 24576), OVERSUB_GAPS (the
scenarios to run, by gap: 0, 0.2, 0.5 and 1; default 0,0.5,1).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

from gpu_runs import attempt, free_mib, inherited, keep_log, launch, private_scheduler, stop
from scheduler_log import lock_events

from gemshare_nvs.protocol import ProtocolError
from gemshare_nvs.wire.connection import Connection, SchedulerUnavailable

WORKLOAD = Path(__file__).resolve().parent / "gpu" / "oversub_pass.py"

class Scenario(NamedTuple):
    gap_s: float  # CPU time before each pass
    ops: int  # elementwise ops over all the memory per pass (40: about 0.5 s for 16 GiB, H100)
    target: float  # the ratio to one after another it should stay under


SCENARIOS = {"oversubscribed pair": Scenario(0.0, 40, 1.0),
             "oversubscribed pair, half busy": Scenario(0.5, 40, 1.0),
             # 16 ops: 0.18 s passes on an H100, each followed by a gap shorter, or longer, than
             # what lending it and taking it back moves (0.86 s for 8.9 GiB each way at 46/43
             # GB/s).
             "oversubscribed pair, 0.2 s gaps": Scenario(0.2, 16, 1.0),
             "oversubscribed pair, 1 s gaps": Scenario(1.0, 16, 0.8)}
TQ = 10
START_GAP_S = 1.0  # the second program starts this long after the first
TIMEOUT_S = 600  # for one run, both programs together
GIB = 1 << 30
GAP_GRANTS = re.compile(r"\bgrant client [^\n]*, in the idle gap of client")
MOVED = re.compile(r"\bmoved client \d+ .*?: device \d+, (\d+) bytes to the (host|device) "
                   r"in ([0-9.]+) s")
# As the scheduler does: smaller moves are mostly fixed costs and say nothing about the link.
RATE_MIN_BYTES = 64 << 20


def settings() -> dict:
    return {"gib": int(os.environ.get("OVERSUB_GIB", "16")),
            "passes": int(os.environ.get("OVERSUB_PASSES", "20")),
            "capacity_mib": int(os.environ.get("OVERSUB_CAPACITY_MIB", "24576")),
            # Only the scenarios whose gap is listed (e.g. "0.5"), to spend less GPU time.
            "gaps": [float(g) for g in os.environ.get("OVERSUB_GAPS", "0,0.5,1").split(",")],
            "tq": TQ, "start_gap_s": START_GAP_S}


def refusal(gib: int, free: list[int]) -> str | None:
    """Why the pair must not run now, or None. The least free GPU counts: nvidia-smi does not
    follow CUDA_VISIBLE_DEVICES, so which one the programs get is not known here."""
    if not free:
        return "nvidia-smi reported no free memory"
    if 2 * gib * 1024 > min(free) / 2:
        return (f"the pair needs 2 x {gib} GiB, more than half of the {min(free)} MiB free "
                f"(lower OVERSUB_GIB, or wait until the card is less busy)")
    return None


def printed(process: subprocess.Popen, stem: Path) -> dict:
    """The program's JSON line; one that exited non-zero counts only if it says why (intact
    false), so that lost data is reported rather than raised."""
    lines = stem.with_suffix(".out").read_text().strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, ValueError):
        result = {}
    if process.returncode != 0 and result.get("intact") is not False:
        raise RuntimeError(f"{' '.join(process.args)} exited {process.returncode}:\n"
                           f"{stem.with_suffix('.err').read_text()[-4000:]}")
    if not result:
        raise RuntimeError(f"{' '.join(process.args)} printed no JSON line")
    return result


def run_pair(command: list[str], env: dict, directory: Path, together: bool) -> dict:
    """Two copies of `command`, together (the second START_GAP_S after the first) or one after
    the other; seconds from the first's start to the last's end."""
    directory.mkdir(parents=True, exist_ok=True)
    stems = [directory / "first", directory / "second"]
    deadline = time.monotonic() + TIMEOUT_S
    processes: list[subprocess.Popen] = []
    try:
        start = time.perf_counter()
        for stem in stems:
            if processes and together:
                time.sleep(START_GAP_S)
            elif processes:
                processes[-1].wait(max(0.0, deadline - time.monotonic()))
            processes.append(launch(command, env, stem))
        for process in processes:
            process.wait(max(0.0, deadline - time.monotonic()))
        seconds = time.perf_counter() - start
    finally:
        stop(processes)  # stragglers, after a timeout or an error
    programs = [printed(process, stem) for process, stem in zip(processes, stems)]
    # Every pass of both, the first ones included: the longest is what a program waited most.
    return {"seconds": seconds, "intact": all(program["intact"] for program in programs),
            "pass_max_s": max(program["pass_max_s"] for program in programs),
            "programs": programs}


def read_status(socket: Path) -> dict | None:
    """The scheduler's status object; None if it could not be had, which is reported."""
    try:
        with Connection(socket, timeout=10) as connection:
            status = connection.request({"op": "status"}).get("status")
    except (OSError, SchedulerUnavailable, ProtocolError):
        return None
    return status if isinstance(status, dict) else None


def moved_bytes(moves) -> int:
    try:
        return sum(int(moves[side]["bytes"]) for side in ("to_host", "to_device"))
    except (TypeError, KeyError, ValueError):
        return 0


def device_moves(status: dict | None) -> dict:
    """`moves` and `move_rates` of the device the pair used (the one that moved the most);
    None where the status lacks them."""
    devices = status.get("devices") if isinstance(status, dict) else None
    entries = [entry for entry in devices or [] if isinstance(entry, dict)]
    used = max(entries, key=lambda entry: moved_bytes(entry.get("moves")), default={})
    return {"moves": used.get("moves"), "move_rates": used.get("move_rates")}


def move_summary(moves: list[tuple[int, float]]) -> dict | None:
    if not moves:
        return None
    sizes = [size for size, _ in moves]
    rates = [size / seconds / 1e9 for size, seconds in moves
             if seconds > 0 and size >= RATE_MIN_BYTES]
    return {"count": len(moves), "bytes_median": statistics.median(sizes),
            "bytes_max": max(sizes), "gbps_median": statistics.median(rates) if rates else None}


def log_figures(log: str) -> dict:
    """Grants, revocations and the moves of each direction, from the scheduler's log."""
    moves: dict[str, list[tuple[int, float]]] = {"host": [], "device": []}
    for size, where, seconds in MOVED.findall(log):
        moves[where].append((int(size), float(seconds)))
    events = lock_events(log)
    return {"grants": events["grants"], "revocations": events["revocations"],
            "early_releases": events["early_releases"], "gap_grants": len(GAP_GRANTS.findall(log)),
            "moved": {"to_host": move_summary(moves["host"]),
                      "to_device": move_summary(moves["device"])}}


def shared_pair(command: list[str], library: Path, directory: Path, mode: str,
                capacity_mib: int) -> dict:
    """The pair together under a scheduler of its own, so that its log is this run's alone."""
    with private_scheduler(library, directory, tq=TQ, anti_thrash=mode,
                           capacity_mib=capacity_mib) as (scheduler, env):
        run = run_pair(command, env, directory, together=True)
        scheduler.check_running()
        status = read_status(scheduler.socket)
    log = scheduler.log_path.read_text()
    keep_log(log, "OVERSUB_LOGS", f"{directory.parent.name}-{mode}.log")
    return {**run, **log_figures(log), **device_moves(status)}


def scenario(python: str, library: Path, directory: Path, name: str, chosen: dict) -> dict:
    gap, ops, target = SCENARIOS[name]
    command = [python, str(WORKLOAD), str(chosen["gib"]), str(chosen["passes"]), str(gap),
               "--ops", str(ops)]
    result = {"gap_s": gap, "ops": ops, "target": target, "one_after_another": attempt(
        f"{name}, one after another, no layer", run_line, run_pair, command, inherited(),
        directory / "plain", False)}
    alone = result["one_after_another"].get("seconds")
    for mode in ("on", "auto"):
        run = attempt(f"{name}, together, {mode}", run_line, shared_pair, command, library,
                      directory / mode, mode, chosen["capacity_mib"])
        result[f"together_{mode}"] = run
        result[f"ratio_{mode}"] = run["seconds"] / alone if alone and "seconds" in run else None
    return result


def unknown_gaps(gaps: list[float]) -> str | None:
    """Why OVERSUB_GAPS cannot be run as given, or None: a gap no scenario has would run nothing
    for it, silently."""
    known = sorted({spec.gap_s for spec in SCENARIOS.values()})
    unknown = sorted(set(gaps) - set(known))
    if not unknown:
        return None
    return (f"OVERSUB_GAPS names {', '.join(f'{g:g}' for g in unknown)}, which no scenario has "
            f"(the scenarios' gaps: {', '.join(f'{g:g}' for g in known)})")


def measure(python: str, library: Path, directory: Path) -> dict:
    chosen = settings()
    reason = unknown_gaps(chosen["gaps"]) or refusal(chosen["gib"], free_mib())
    if reason:
        print(f"oversub skipped: {reason}", file=sys.stderr)
        return {**chosen, "skipped": reason}
    if 2 * chosen["gib"] * 1024 <= chosen["capacity_mib"]:
        print("oversub: the pair fits in OVERSUB_CAPACITY_MIB, so no handoff needs to move "
              "memory", file=sys.stderr)
    return {**chosen, "scenarios": {
        name: scenario(python, library, directory / f"gap{spec.gap_s:g}", name, chosen)
        for name, spec in SCENARIOS.items() if spec.gap_s in chosen["gaps"]}}


def gib(size) -> str:
    return f"{size / GIB:.2f}"


def direction(name: str, summary: dict | None) -> str:
    if summary is None:
        return f"{name} none"
    rate = summary["gbps_median"]
    return (f"{name} {summary['count']} x {gib(summary['bytes_median'])}/"
            f"{gib(summary['bytes_max'])} GiB " + ("rate n/a" if rate is None else
                                                    f"at {rate:.1f} GB/s"))


def status_moves(run: dict) -> str:
    moves, rates = run.get("moves"), run.get("move_rates")
    try:
        text = (f"status: {gib(moves['to_host']['bytes'])} GiB out in "
                f"{moves['to_host']['seconds']:.1f} s, {gib(moves['to_device']['bytes'])} GiB "
                f"back in {moves['to_device']['seconds']:.1f} s")
    except (TypeError, KeyError, ValueError):
        text = "status: moves n/a"
    try:
        measured = "measured" if rates["measured"] else "defaults"
        return (text + f", rates {rates['to_host_gbps']:.1f} out / "
                f"{rates['to_device_gbps']:.1f} back GB/s ({measured})")
    except (TypeError, KeyError, ValueError):
        return text


def run_line(name: str, run: dict, ratio: float | None = None,
             target: float | None = None) -> str:
    if "error" in run:
        lines = run["error"].strip().splitlines()  # what failed, and the program's last word
        return f"{name}: FAILED ({' ... '.join(dict.fromkeys([lines[0], lines[-1]]))})"
    line = f"{name}: {run['seconds']:.1f} s"
    if ratio is not None:
        line += f" ({ratio:.2f} of one after another"
        if target is not None:
            line += f", target <= {target:g}: " + ("met" if ratio <= target else "MISSED")
        line += ")"
    if "grants" in run:
        moved = run["moved"]
        line += (f"; {run['grants']} grants ({run.get('early_releases', 0)} after early "
                 f"releases, {run.get('gap_grants', 0)} in the other's idle gaps), "
                 f"{run['revocations']} revocations; per handoff "
                 f"(median/max) {direction('out', moved['to_host'])}, "
                 f"{direction('back', moved['to_device'])}; {status_moves(run)}")
    return line + ("; intact" if run["intact"] else "; DATA NOT INTACT")


def print_oversub(part: dict) -> None:
    if "skipped" in part:
        print(f"oversub: skipped ({part['skipped']})")
        return
    print(f"oversub: 2 x {part['gib']} GiB, {part['passes']} passes each, scheduler capacity "
          f"{part['capacity_mib']} MiB, TQ {part['tq']} s")
    for name, result in part["scenarios"].items():
        print(run_line(f"{name}, one after another, no layer", result["one_after_another"]))
        for mode in ("on", "auto"):
            print(run_line(f"{name}, together, {mode}", result[f"together_{mode}"],
                           result[f"ratio_{mode}"], result.get("target")))
