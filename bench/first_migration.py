"""The machine's first migration to the host, timed before any part runs.

On an H200 machine just started, the driver's first migration of managed memory to the host ran
at 3.4, 4.0 and 3.9 GB/s (three machines, 2026-12-04, bench/gpu/first_move_out.c), where the
next ones, in new processes too, ran at 10-16.9 GB/s. It is paid once per machine, by whichever
program moves memory out first, so bench-gpu pays it itself, with 4 GiB, before the parts, and
says what it cost: no part's figures then depend on whether it ran first. It does not make the
notebooks' start fast: their migrations, beside others filling and pinning, still ran at
3.4-4.0 GB/s (docs/benchmarks.md, thirteenth run).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from gpu_runs import free_mib, too_little_free

HERE = Path(__file__).resolve().parent / "gpu"
GIB = 4
TIMEOUT_S = 120


def build(build_dir: Path) -> Path:
    binary = build_dir / "bench" / "first_move_out"
    binary.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["nvcc", "-O2", "-o", str(binary), str(HERE / "first_move_out.c"), "-lcuda",
                    "-lpthread"], check=True)
    return binary


def one_move(binary: Path) -> float:
    """GB/s of one program's move of GIB GiB out by the driver's migration, checked intact."""
    done = subprocess.run([str(binary), str(GIB), "1", "migrate"], capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    moves = [line for line in lines if line.get("way") == "migrate"]
    if done.returncode != 0 or not moves or not moves[0].get("intact"):
        raise RuntimeError(f"first_move_out failed ({done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[-300:]}")
    return moves[0]["gb_per_s"]


def measure(build_dir: Path, free=free_mib) -> dict:
    """The first move and one after it, or why neither was timed (the parts still run)."""
    if shutil.which("nvcc") is None:
        return {"skipped": "no nvcc to build bench/gpu/first_move_out.c"}
    busy = too_little_free(free(), 2 * GIB * 1024)  # its memory under half of what is free
    if busy:
        return {"skipped": busy}
    try:
        binary = build(build_dir)
        return {"gib": GIB, "first_gb_per_s": one_move(binary), "again_gb_per_s": one_move(binary)}
    except (OSError, RuntimeError, subprocess.SubprocessError, ValueError) as failure:
        return {"error": str(failure)}


def line(result: dict) -> str:
    if "skipped" in result or "error" in result:
        return f"machine's first migration: not timed ({result.get('skipped') or result['error']})"
    return (f"machine's first migration ({result['gib']} GiB, once, before the parts): "
            f"{result['first_gb_per_s']:.1f} GB/s, then {result['again_gb_per_s']:.1f} GB/s")
