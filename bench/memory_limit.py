"""bench-gpu part `memory_limit`: programs that fit a memory limit without staging memory fit it
with staging too (libnvs falls back to the driver's migration before the OOM killer comes).

Two notebooks (bench/gpu/notebook_cells.py) of MEMLIMIT_GIB GiB each (default 4), a cell every
MEMLIMIT_PERIOD_S (default 1) for MEMLIMIT_CELLS cells (default 8), under a scheduler in mode
`on` whose capacity (`--capacity-mib`) holds one and a half of them, so that every grant moves
the other's memory out. First with no staging (`GEMSHARE_STAGING_MAX_MIB=0`: the driver
migrates every move) in a memory cgroup of their own with no limit, whose peak is what they
need; then with staging as it comes, in a cgroup limited to that peak and a quarter more. The
programs check their elements one at a time, each after the last has exited, in both runs:
checks made at once (each needs memory beside its program's) made the end's moves, and with
them the peak and the OOM killer's choice, differ from run to run. The
figures: how many programs the OOM killer took in each, whether every element is intact, and
the second run's time over the first's. A host whose cgroups cannot be made here (no memory
controller handed down, no permission) skips the part, saying why. MEMLIMIT_LOGS=DIR keeps the
programs' stderr; MEMLIMIT_DEBUG=1 puts libnvs's debug lines in it (its moves, its pins, what it
gave back).
"""

from __future__ import annotations

import os
from pathlib import Path

import memory_cgroup
from gpu_runs import free_mib, keep_log, private_scheduler, stderr_tail, with_debug
from notebooks import run_set

TQ = 10
HEADROOM = 1.25  # the limit of the run with staging, over the peak of the run without


def settings() -> dict:
    return {"programs": 2, "gib": int(os.environ.get("MEMLIMIT_GIB", "4")),
            "cells": int(os.environ.get("MEMLIMIT_CELLS", "8")),
            "period_s": float(os.environ.get("MEMLIMIT_PERIOD_S", "1")), "ops": 20, "tq": TQ}


def one_run(python: str, library: Path, directory: Path, chosen: dict, env: dict,
            limit: int | None) -> dict:
    """The programs in a cgroup of their own (limited to `limit` bytes where given): what the
    cgroup saw, and the cells' figures unless a program did not finish."""
    group, why = memory_cgroup.create()
    if group is None:
        return {"skipped": why}
    try:
        if limit is not None:
            group.limit(limit)
        with private_scheduler(library, directory, tq=TQ, anti_thrash="on",
                               capacity_mib=chosen["gib"] * 1536) as (scheduler, shared):
            run = {"limit_bytes": limit}
            try:
                run.update(run_set(python, with_debug({**shared, **env}, "MEMLIMIT_DEBUG"),
                                   directory, chosen["programs"], chosen["gib"], chosen,
                                   wrap=group.wrap, checks_in_turn=True))
            except Exception as exc:  # an OOM kill ends a program without its JSON line
                run.update(error=f"{type(exc).__name__}: {exc}", intact=False,
                           stderr=stderr_tail(directory, "program"))
        run.update(peak_bytes=group.peak(), oom_kills=group.oom_kills())
        for index in range(chosen["programs"]):  # libnvs's warnings: what it gave back, when
            err = directory / f"program-{index}.err"
            if err.exists():
                keep_log(err.read_text(), "MEMLIMIT_LOGS", f"{directory.name}-program-{index}.err")
        return run
    finally:
        group.remove()


def measure(python: str, library: Path, directory: Path, chosen: dict | None = None) -> dict:
    chosen = chosen or settings()
    free = free_mib()
    if not free or chosen["programs"] * chosen["gib"] * 1024 > min(free) / 2:
        return {**chosen, "skipped": f"{chosen['programs']} x {chosen['gib']} GiB is more than "
                                     f"half of the free memory ({free} MiB)"}
    without = one_run(python, library, directory / "without_staging", chosen,
                      {"GEMSHARE_STAGING_MAX_MIB": "0"}, None)
    if "skipped" in without or "error" in without:
        return {**chosen, "skipped": without.get("skipped") or
                f"the run without staging failed: {without['error']}", "without_staging": without}
    limit = int(without["peak_bytes"] * HEADROOM)
    with_staging = one_run(python, library, directory / "with_staging", chosen, {}, limit)
    result = {**chosen, "without_staging": without, "with_staging": with_staging,
              "oom_kills": with_staging.get("oom_kills", 0) + without["oom_kills"],
              "intact": bool(without["intact"] and with_staging.get("intact"))}
    if "seconds" in with_staging:
        result["ratio_to_without"] = with_staging["seconds"] / without["seconds"]
    return result


def print_memory_limit(part: dict) -> None:
    name = f"memory limit, {part['programs']} x {part['gib']} GiB"
    if "skipped" in part:
        print(f"{name}: skipped ({part['skipped']})")
        return
    without, limited = part["without_staging"], part["with_staging"]
    print(f"{name}, no staging, no limit: peak {without['peak_bytes'] / 2**30:.2f} GiB, "
          f"all done in {without['seconds']:.1f} s, slowest cell {without['cell_max_s']:.2f} s")
    line = (f"{name}, staging, limit {limited['limit_bytes'] / 2**30:.2f} GiB: peak "
            f"{limited.get('peak_bytes', 0) / 2**30:.2f} GiB, {limited.get('oom_kills', 0)} "
            "killed by the OOM killer")
    if limited.get("exit_codes"):
        line += f" (exit statuses {', '.join(map(str, limited['exit_codes']))})"
    if "error" in limited:
        line += f", FAILED ({limited['error'].splitlines()[0]})"
    else:
        line += (f", all done in {limited['seconds']:.1f} s "
                 f"({part['ratio_to_without']:.2f} of no staging), slowest cell "
                 f"{limited['cell_max_s']:.2f} s")
    print(line + ("; intact" if part["intact"] else "; DATA NOT INTACT"))
