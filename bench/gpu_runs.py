"""Running a bench-gpu part's programs: each as a subprocess with its output in files, the shared
ones under a scheduler of their own, and none left running whatever way a run ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from scheduler_process import SchedulerProcess

# Inherited settings that would change what is measured or endanger a shared card: debug logging
# slows every handoff, and single-process oversubscription must never be enabled here.
UNWANTED = ("GEMSHARE_DEBUG", "GEMSHARE_ENABLE_SINGLE_OVERSUB")


def inherited() -> dict:
    return {name: value for name, value in os.environ.items() if name not in UNWANTED}


def free_mib() -> list[int]:
    """Free memory of each GPU nvidia-smi lists, in MiB; none if it does not answer."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=memory.free",
                               "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []
    return [int(field) for field in done.stdout.split() if field.isdigit()]


def too_little_free(free: list[int], minimum_mib: int) -> str | None:
    """Why a part that leaves itself `minimum_mib` must not run now, or None; the least free GPU
    counts: nvidia-smi does not follow CUDA_VISIBLE_DEVICES."""
    if not free:
        return "nvidia-smi reported no free memory"
    if min(free) < minimum_mib:
        return f"{min(free)} MiB free, less than the {minimum_mib} MiB this part leaves itself"
    return None


def launch(command: list[str], env: dict, stem: Path) -> subprocess.Popen:
    # Output to files, not pipes: a program blocked on a full pipe while it holds the GPU lock
    # would stall its partner as well.
    with open(stem.with_suffix(".out"), "w") as out, open(stem.with_suffix(".err"), "w") as err:
        return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=err)


def stop(processes: list[subprocess.Popen], grace_s: float = 0.0) -> None:
    """Ends whichever are still running: SIGTERM and `grace_s` to exit, then SIGKILL."""
    for process in processes:
        if process.poll() is None and grace_s > 0:
            process.terminate()
            try:
                process.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        if process.poll() is None:
            process.kill()
            process.wait()


@contextmanager
def private_scheduler(library: Path, directory: Path, args: list[str] = (), **options):
    """A scheduler for one run, so that its log is that run's alone; yields it and the
    environment that runs a program under it. `options` and `args` as for SchedulerProcess."""
    directory.mkdir(parents=True)
    scheduler = SchedulerProcess(directory, env=inherited(), args=args, **options)
    # REQUIRE_SCHEDULER: a program that failed to register fails instead of running unlocked.
    env = {**inherited(), "LD_PRELOAD": str(library), "GEMSHARE_SOCKET": str(scheduler.socket),
           "GEMSHARE_REQUIRE_SCHEDULER": "1"}
    try:
        yield scheduler, env
    finally:
        scheduler.stop()


def with_debug(env: dict, variable: str, environ=os.environ) -> dict:
    """`env`, with libnvs's debug lines (its moves, time-stamped, in each program's stderr) where
    the part's `variable` is 1: GEMSHARE_DEBUG itself never reaches the programs (inherited)."""
    return {**env, "GEMSHARE_DEBUG": "1"} if environ.get(variable) == "1" else env


def keep_log(log: str, variable: str, name: str) -> None:
    """Copies a run's scheduler log into the folder the environment variable names, if any:
    where a run's whole story can be read afterwards."""
    kept = os.environ.get(variable)
    if kept:
        Path(kept).mkdir(parents=True, exist_ok=True)
        (Path(kept) / name).write_text(log)


def attempt(name: str, line, measure, *args) -> dict:
    """One run's figures, or its error: a failed run must not lose the other runs' figures.
    `line(name, run)` is its progress line, printed should the rest not end."""
    try:
        run = measure(*args)
    except Exception as exc:
        run = {"error": f"{type(exc).__name__}: {exc}"}
    print(line(name, run), file=sys.stderr, flush=True)
    return run


def stderr_tail(directory: Path, prefix: str) -> str:
    """The ends of the PREFIX-* programs' stderr files in `directory`: why a start failed."""
    tails = [path.read_text()[-1500:] for path in sorted(directory.glob(f"{prefix}-*.err"))]
    return "\n".join(tail for tail in tails if tail.strip())[-4000:]


def printed(stem: Path) -> dict:
    """The JSON line a workload printed last on its `.out`; a clear error with its stderr's end
    when there is none."""
    lines = stem.with_suffix(".out").read_text().strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        raise RuntimeError(f"{stem.name} printed no JSON line:\n"
                           f"{stem.with_suffix('.err').read_text()[-3000:]}") from None


def percentile(values: list[float], fraction: float) -> float | None:
    """The nearest-rank percentile (`fraction` 0-1) of `values`; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]
