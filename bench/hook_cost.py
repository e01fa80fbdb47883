"""What libnvs.so adds to one kernel launch while its process holds the GPU lock.

bench/cpu/launch_cost.c is run alternately plain (A) and under libnvs.so with a real scheduler
(B), `rounds` times each (ab.interleave); the figure is median(B) - median(A) in ns per launch.
Two driver behaviours (see launch_cost.c): `rejected`, launches the fake driver refuses before
queueing, which leaves libnvs's gate nearly alone in the call, and `queued`, real launches the
fake queues (closer to a real launch, noisier).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
from pathlib import Path

from ab import interleave
from scheduler_process import SchedulerProcess

SOURCE = Path(__file__).resolve().parent / "cpu" / "launch_cost.c"
REPO = SOURCE.parents[2]
# The CUDA declarations it compiles against (the fake driver's, from libnvs's table).
HEADERS = [REPO / "libnvs" / "cuda" / "cuda_api.h", REPO / "libnvs" / "cuda" / "hooks.def",
           REPO / "tests" / "fakecuda" / "fake_cuda.h",
           REPO / "tests" / "fakecuda" / "fake_entry_points.def"]


def build(build_dir: Path) -> Path:
    """bench/cpu/launch_cost.c compiled into build_dir/bench with $CC (gcc alone, no CUDA)."""
    binary = build_dir / "bench" / "launch_cost"
    newest = max(path.stat().st_mtime for path in [SOURCE, *HEADERS])
    if binary.exists() and binary.stat().st_mtime >= newest:
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([os.environ.get("CC") or "cc", "-std=gnu11", "-O2", "-Wall", "-Wextra",
                    "-Werror", f"-I{REPO / 'libnvs'}", f"-I{REPO / 'tests' / 'fakecuda'}",
                    "-o", str(binary), str(SOURCE), "-ldl"], check=True)
    return binary


def measure(build_dir: Path, directory: Path, rounds: int, launches: dict[str, int]) -> dict:
    """{mode: interleave result + overhead_ns} for each mode in `launches` (mode -> count)."""
    binary = build(build_dir)
    directory.mkdir(parents=True)
    scheduler = SchedulerProcess(directory, anti_thrash="on")
    # An empty FAKECUDA_LOG keeps the fake driver from logging; LD_PRELOAD is set either way.
    plain = {"LD_LIBRARY_PATH": str(build_dir / "fakecuda"), "FAKECUDA_LOG": "",
             "LD_PRELOAD": ""}
    # REQUIRE_SCHEDULER: a run that failed to register would fail instead of running unlocked.
    shared = {**plain, "LD_PRELOAD": str(build_dir / "libnvs.so"),
              "GEMSHARE_SOCKET": str(scheduler.socket), "GEMSHARE_REQUIRE_SCHEDULER": "1"}
    results = {}
    try:
        for mode, count in launches.items():
            result = interleave([str(binary), mode, str(count)], "ns_per_launch", rounds,
                                plain, shared)
            result["overhead_ns"] = result["median_b"] - result["median_a"]
            # Each B against the A just before it: another view that cancels slow drifts.
            result["paired_overhead_ns"] = statistics.median(
                b - a for a, b in zip(result["samples_a"], result["samples_b"]))
            results[mode] = result
        scheduler.check_running()
    finally:
        scheduler.stop()
    check_every_run_held_the_lock(scheduler.log_path.read_text(), rounds * len(launches))
    return results


def check_every_run_held_the_lock(log: str, runs: int) -> None:
    """Each libnvs run was granted the lock once and never lost it while it ran."""
    granted = len(re.findall(r"\bgrant client \d+", log))
    lost = re.findall(r"\b(?:drop|revoke|release) client \d+.*", log)
    if granted != runs or lost:
        raise RuntimeError(f"expected {runs} grants and no drop/revoke/release in the scheduler "
                           f"log, got {granted} grants and {lost[:3]}:\n{log[-3000:]}")
