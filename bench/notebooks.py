"""bench-gpu part `notebooks`: many mostly idle programs whose memory does not fit together.

Each set runs N copies of bench/gpu/notebook_cells.py, M GiB each, a cell every PERIOD seconds
that touches all of the program's memory, the programs' first cells PERIOD / N apart: with no
layer (the card holds them all: the ideal no sharing layer can beat), then under libnvs.so with a
fresh scheduler at `--capacity-mib` in mode `on`, then in mode `auto`. The card is never really
oversubscribed: the capacity makes the scheduler move memory as on a full card of that size,
while all the programs stay within half the real card's free memory.

Environment: NOTEBOOKS_SETS (the sets, as NxGIB, default "4x12,8x6"), NOTEBOOKS_CAPACITY_MIB
(default 32768), NOTEBOOKS_PERIOD_S (default 3), NOTEBOOKS_CELLS (default 16), NOTEBOOKS_OPS
(elementwise ops over all of a program's memory per cell, default 20: about 0.13 s for 12 GiB on
an H200), NOTEBOOKS_LOGS=DIR (keep each shared run's scheduler log and its programs' stderr
there), NOTEBOOKS_DEBUG=1 (libnvs's debug lines in that stderr: its moves, time-stamped).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

from gpu_runs import (attempt, free_mib, inherited, keep_log, launch, percentile, printed,
                      private_scheduler, stderr_tail, stop, with_debug)
from oversub import device_moves, direction, log_figures, read_status
from scheduler_log import eviction_answers, first_moves_out

WORKLOAD = Path(__file__).resolve().parent / "gpu" / "notebook_cells.py"
TQ = 10
# A first move out this long or more after the program's allocation ended had time to find its
# staging memory ready, prepared from the allocation on, and should go at the copy's speed (at
# least FIRST_MOVE_GBPS); moves under 256 MiB take milliseconds whatever their rate.
FIRST_MOVE_AFTER_S = 3.0
FIRST_MOVE_GBPS = 20.0
FIRST_MOVE_LEAST = 256 << 20
READY_TIMEOUT_S = 300  # CUDA's start and filling the memory, for all the programs
RUN_TIMEOUT_S = 600


def settings() -> dict:
    sets = []
    for spec in os.environ.get("NOTEBOOKS_SETS", "4x12,8x6").split(","):
        count, _, gib = spec.strip().partition("x")
        sets.append({"programs": int(count), "gib": int(gib)})
    return {"sets": sets, "capacity_mib": int(os.environ.get("NOTEBOOKS_CAPACITY_MIB", "32768")),
            "period_s": float(os.environ.get("NOTEBOOKS_PERIOD_S", "3")),
            "cells": int(os.environ.get("NOTEBOOKS_CELLS", "16")),
            "ops": int(os.environ.get("NOTEBOOKS_OPS", "20")), "tq": TQ}


def refusal(programs: int, gib: int, free: list[int]) -> str | None:
    """Why a set must not run now, or None: with no layer all its memory is on the card."""
    if not free:
        return "nvidia-smi reported no free memory"
    if programs * gib * 1024 > min(free) / 2:
        return (f"{programs} x {gib} GiB is more than half of the {min(free)} MiB free (choose "
                f"smaller NOTEBOOKS_SETS, or wait until the card is less busy)")
    return None


def run_set(python: str, env: dict, directory: Path, programs: int, gib: int,
            chosen: dict, wrap=None, checks_in_turn: bool = False) -> dict:
    """The programs together, from one start signal once every one has its memory filled;
    `wrap(command)`, where given, is the command line that starts each (in a cgroup, say);
    `checks_in_turn`: their end checks one at a time (notebook_cells.py)."""
    directory.mkdir(parents=True, exist_ok=True)
    go = directory / "go"
    finished = directory / "finished"
    finished.mkdir()
    processes = []
    try:
        for index in range(programs):
            ready = directory / f"ready-{index}"
            command = [python, str(WORKLOAD), str(gib), str(chosen["cells"]),
                       str(chosen["period_s"]), "--ops", str(chosen["ops"]),
                       "--ready", str(ready), "--go", str(go),
                       "--offset", str(index * chosen["period_s"] / programs),
                       "--finished", str(finished), "--programs", str(programs)]
            command += ["--check-in-turn"] if checks_in_turn else []
            processes.append(launch(wrap(command) if wrap else command, env,
                                    directory / f"program-{index}"))
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not all((directory / f"ready-{index}").exists() for index in range(programs)):
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                raise RuntimeError("a program did not get ready: " + stderr_tail(directory, "program"))
            time.sleep(0.1)
        staged = directory / "go.new"  # renamed into place: a program never reads half of it
        staged.write_text(repr(time.time() + 0.5))
        staged.rename(go)
        deadline = time.monotonic() + RUN_TIMEOUT_S
        for process in processes:
            process.wait(max(0.0, deadline - time.monotonic()))
    finally:
        stop(processes)
    results = [printed(directory / f"program-{index}") for index in range(programs)]
    # A program killed after its last line (the OOM killer at its exit, say) shows only here.
    return {**cell_figures(results), "exit_codes": [process.returncode for process in processes],
            "intact": all(result["intact"] for result in results),
            "programs": [{key: result.get(key) for key in (
                "allocation_s", "pid", "allocated_at", "first_cell_s", "cell_median_s",
                "cell_p95_s", "cell_max_s", "cells_s", "intact")} for result in results]}


def cell_figures(results: list[dict]) -> dict:
    """The cells of every program: those timed from the common start (`cell_*`), and every cell
    a user waits for, each program's first included (`every_cell_*`, what the targets read);
    the slowest allocation, where waiting for room shows."""
    cells = [cell for result in results for cell in result["cells_s"]]
    every = cells + [result["first_cell_s"] for result in results]
    allocations = [result["allocation_s"] for result in results if "allocation_s" in result]
    return {"first_cell_max_s": max(result["first_cell_s"] for result in results),
            "cell_median_s": statistics.median(cells), "cell_p95_s": percentile(cells, 0.95),
            "cell_max_s": max(cells), "every_cell_median_s": statistics.median(every),
            "every_cell_max_s": max(every),
            "allocation_max_s": max(allocations) if allocations else None,
            "seconds": max(result["seconds_from_go"] for result in results)}


def shared_set(python: str, library: Path, directory: Path, mode: str, programs: int, gib: int,
               chosen: dict) -> dict:
    with private_scheduler(library, directory, tq=TQ, anti_thrash=mode,
                           capacity_mib=chosen["capacity_mib"]) as (scheduler, env):
        run = run_set(python, with_debug(env, "NOTEBOOKS_DEBUG"), directory, programs, gib, chosen)
        scheduler.check_running()
        status = read_status(scheduler.socket)
    log = scheduler.log_path.read_text()
    keep_log(log, "NOTEBOOKS_LOGS", f"{programs}x{gib}-{mode}.log")
    for index in range(programs):  # libnvs's lines (with GEMSHARE_DEBUG=1, its moves)
        keep_log((directory / f"program-{index}.err").read_text(), "NOTEBOOKS_LOGS",
                 f"{programs}x{gib}-{mode}-program-{index}.err")
    return {**run, **log_figures(log), **device_moves(status), "evictions": evictions(log),
            "first_moves": first_moves(run["programs"], log)}


def first_moves(programs: list[dict], log: str) -> dict:
    """Each program's first move out, from the scheduler's log: how many came at least
    FIRST_MOVE_AFTER_S after the program's allocation ended, how many of those went slower
    than FIRST_MOVE_GBPS and the slowest (GB/s); how many came sooner (in the programs'
    start, while the others start too)."""
    moves = first_moves_out(log, FIRST_MOVE_LEAST)
    rates, sooner = [], 0
    for program in programs:
        move = moves.get(program.get("pid"))
        if move is None or program.get("allocated_at") is None:
            continue
        began, size, seconds = move
        if began.timestamp() - program["allocated_at"] >= FIRST_MOVE_AFTER_S:
            rates.append(size / max(seconds, 1e-3) / 1e9)
        else:
            sooner += 1
    return {"count": len(rates), "slow": sum(rate < FIRST_MOVE_GBPS for rate in rates),
            "sooner": sooner, "slowest_gb_per_s": min(rates, default=None)}


def evictions(log: str) -> dict:
    """How long the clients took to answer EVICTs, staging memory's preparation included."""
    answers = eviction_answers(log)
    return {"count": len(answers),
            "median_s": statistics.median(answers) if answers else None,
            "longest_s": max(answers, default=None)}


def one_set(python: str, library: Path, directory: Path, programs: int, gib: int,
            chosen: dict) -> dict:
    name = f"{programs} x {gib} GiB"
    result = {"programs": programs, "gib": gib, "no_layer": attempt(
        f"notebooks {name}, no layer", run_line, run_set, python, inherited(),
        directory / "plain", programs, gib, chosen)}
    for mode in ("on", "auto"):
        run = attempt(f"notebooks {name}, {mode}", run_line, shared_set, python, library,
                      directory / mode, mode, programs, gib, chosen)
        result[mode] = against_no_layer(run, result["no_layer"])
    return result


def against_no_layer(run: dict, plain: dict) -> dict:
    """A shared run's figures over the same programs with no layer: the whole run's time, and
    how much longer its slowest allocation took (what it waited for the others)."""
    if "error" in run or "error" in plain:
        return run
    run = {**run, "ratio_to_no_layer": run["seconds"] / plain["seconds"]}
    if run.get("allocation_max_s") is not None and plain.get("allocation_max_s") is not None:
        run["allocation_wait_max_s"] = run["allocation_max_s"] - plain["allocation_max_s"]
    return run


def measure(python: str, library: Path, directory: Path) -> dict:
    chosen = settings()
    free = free_mib()
    sets = {}
    for spec in chosen["sets"]:
        programs, gib = spec["programs"], spec["gib"]
        reason = refusal(programs, gib, free)
        if reason:
            print(f"notebooks {programs} x {gib} GiB skipped: {reason}", file=sys.stderr)
            sets[f"{programs}x{gib}"] = {"programs": programs, "gib": gib, "skipped": reason}
            continue
        sets[f"{programs}x{gib}"] = one_set(python, library, directory / f"{programs}x{gib}",
                                            programs, gib, chosen)
    return {**chosen, "sets": sets}


def run_line(name: str, run: dict) -> str:
    if "error" in run:
        lines = run["error"].strip().splitlines()
        return f"{name}: FAILED ({' ... '.join(dict.fromkeys([lines[0], lines[-1]]))})"
    line = (f"{name}: cell median {run['cell_median_s']:.3f} s, p95 {run['cell_p95_s']:.3f} s, "
            f"slowest {run['cell_max_s']:.3f} s (each program's first, before the start, at "
            f"most {run['first_cell_max_s']:.3f} s; every cell: median "
            f"{run.get('every_cell_median_s', float('nan')):.3f} s, slowest "
            f"{run.get('every_cell_max_s', float('nan')):.3f} s), all done in "
            f"{run['seconds']:.1f} s")
    if run.get("allocation_max_s") is not None:
        line += f"; slowest allocation {run['allocation_max_s']:.2f} s"
        if run.get("allocation_wait_max_s") is not None:
            line += f" ({run['allocation_wait_max_s']:+.2f} s against no layer)"
    if "ratio_to_no_layer" in run:
        # The bounds it is held to are the scenario registry's (bench/scenarios.py), whose
        # table follows the parts' lines.
        line += f" ({run['ratio_to_no_layer']:.2f} of no layer)"
    if "grants" in run:
        moved = run["moved"]
        line += (f"; {run['grants']} grants, {run['early_releases']} early releases, "
                 f"{run['revocations']} revocations; moves (median/largest) "
                 f"{direction('out', moved['to_host'])}, {direction('back', moved['to_device'])}")
    if run.get("evictions", {}).get("count"):
        answers = run["evictions"]
        line += (f"; {answers['count']} EVICTs answered in {answers['median_s']:.3f} s median, "
                 f"{answers['longest_s']:.2f} s at most")
    if first := run.get("first_moves"):
        slowest = first["slowest_gb_per_s"]
        line += (f"; first moves out {FIRST_MOVE_AFTER_S:g} s or more after the allocation: "
                 f"{first['count']}" + (f", {first['slow']} under {FIRST_MOVE_GBPS:g} GB/s, the "
                                        f"slowest at {slowest:.1f}" if first["count"] else "")
                 + f" ({first['sooner']} sooner)")
    return line + ("; intact" if run["intact"] else "; DATA NOT INTACT")


def print_notebooks(part: dict) -> None:
    print(f"notebooks: scheduler capacity {part['capacity_mib']} MiB, a cell every "
          f"{part['period_s']:g} s ({part['ops']} ops over all memory), {part['cells']} cells, "
          f"TQ {part['tq']} s")
    for name, result in part["sets"].items():
        if "skipped" in result:
            print(f"notebooks {name}: skipped ({result['skipped']})")
            continue
        for mode in ("no_layer", "on", "auto"):
            print(run_line(f"notebooks {result['programs']} x {result['gib']} GiB, {mode}",
                           result[mode]))
