"""bench-gpu part `beside_trainer`: an interactive user's bursts beside a trainer that never
pauses, with no sharing layer and under gemshare (TQ 30 s, mode `on` and `auto`).

Each round runs bench/gpu/matmul_bursts.py alone, bench/gpu/matmul_trainer.py alone, both with
no layer, then both under libnvs.so once per mode, each time with a fresh scheduler of its own.
Together, the trainer starts first and the bursts once it runs at full speed; the trainer is
stopped when the bursts end, so a run lasts as long as the bursts need. beside_report.py turns
what they print into figures.

Environment: BESIDE_BURSTS (default 6), BESIDE_ROUNDS (default 1), BESIDE_MODES (default
"on,auto"), BESIDE_SCHEDULER_ARGS (more scheduler flags for every gemshare run, after the
bench's own, so that they win: "--min-slice-ms 300"), BESIDE_SCHEDULER_ARGS_B (when set, each
mode runs a second time with these flags instead, named MODE_b, next to the first in every
round), BESIDE_LOGS=DIR (keep every gemshare run's scheduler log there).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from beside_report import (
    burst_records,
    bursts_figures,
    run_line,
    step_times,
    steps_per_s,
    summary,
    together_figures,
)
from gpu_runs import (attempt, free_mib, inherited, keep_log, launch, private_scheduler, stop,
                      too_little_free)
from scheduler_log import lock_events

HERE = Path(__file__).resolve().parent / "gpu"
TQ = 30
MATMULS, SIZE, GAP_S = 20, 8192, 2.0  # a burst: about 0.43 s on an H100 alone
TRAINER_ALONE_S = 10.0  # the trainer alone is timed over this long
READY_TIMEOUT_S = 90.0  # PyTorch's and CUDA's start-up, and under gemshare a first grant
# What the bursts program may take: its start-up, then each burst's gap and this much more. A
# burst that waits longer has failed its goal many times over; stopping it keeps the run short.
START_UP_S, BURST_SLACK_S = 30.0, 8.0
STOP_GRACE_S = 10.0
# Each program holds about 0.8 GiB of tensors besides its CUDA context: a few GiB in all, but
# the card may be shared, so some room is left to others.
FREE_MIB_MIN = 8192
MODES = ("on", "auto", "off")


def settings(environ=os.environ) -> dict:
    """The part's settings from the environment; stops with what is wrong before anything runs."""
    try:
        bursts = int(environ.get("BESIDE_BURSTS", "6"))
        rounds = int(environ.get("BESIDE_ROUNDS", "1"))
    except ValueError as exc:
        raise SystemExit(f"BESIDE_BURSTS and BESIDE_ROUNDS must be whole numbers ({exc})")
    modes = [mode.strip() for mode in environ.get("BESIDE_MODES", "on,auto").split(",")
             if mode.strip()]
    if bursts < 1 or rounds < 1 or not modes or set(modes) - set(MODES):
        raise SystemExit("BESIDE_BURSTS and BESIDE_ROUNDS must be at least 1, BESIDE_MODES a "
                         f"comma-separated list of {', '.join(MODES)}")
    try:
        args = shlex.split(environ.get("BESIDE_SCHEDULER_ARGS", ""))
        args_b = (None if environ.get("BESIDE_SCHEDULER_ARGS_B") is None
                  else shlex.split(environ["BESIDE_SCHEDULER_ARGS_B"]))
    except ValueError as exc:
        raise SystemExit(f"BESIDE_SCHEDULER_ARGS(_B): {exc}")
    return {"bursts": bursts, "rounds": rounds, "modes": modes, "scheduler_args": args,
            "scheduler_args_b": args_b, "tq": TQ, "matmuls": MATMULS, "size": SIZE,
            "gap_s": GAP_S}


def refusal(free: list[int]) -> str | None:
    return too_little_free(free, FREE_MIB_MIN)


def shared_runs(chosen: dict, index: int) -> list[tuple[str, str, list[str]]]:
    """(name, mode, scheduler flags) of each gemshare run of round `index`."""
    variants = [("", chosen["scheduler_args"])]
    if chosen["scheduler_args_b"] is not None:
        variants.append(("_b", chosen["scheduler_args_b"]))
        if index % 2:  # B first every other round, so that neither always runs first
            variants.reverse()
    return [(mode + suffix, mode, args) for mode in chosen["modes"] for suffix, args in variants]


def bursts_timeout(chosen: dict) -> float:
    return START_UP_S + chosen["bursts"] * (chosen["gap_s"] + BURST_SLACK_S)


def bursts_command(python: str, chosen: dict) -> list[str]:
    return [python, str(HERE / "matmul_bursts.py"), "--bursts", str(chosen["bursts"]),
            "--matmuls", str(chosen["matmuls"]), "--size", str(chosen["size"]),
            "--gap-s", str(chosen["gap_s"])]


def trainer_command(python: str, chosen: dict, ready: Path) -> list[str]:
    # Its own end comes after everything this bench would wait for: only if the bench died.
    longest = READY_TIMEOUT_S + max(bursts_timeout(chosen), TRAINER_ALONE_S) + 2 * STOP_GRACE_S
    return [python, str(HERE / "matmul_trainer.py"), "--size", str(chosen["size"]),
            "--ready", str(ready), "--max-seconds", str(longest)]


def failure(process: subprocess.Popen, stem: Path) -> RuntimeError:
    return RuntimeError(f"{' '.join(process.args)} exited {process.returncode}:\n"
                        f"{stem.with_suffix('.err').read_text()[-4000:]}")


def output(stem: Path) -> str:
    return stem.with_suffix(".out").read_text()


def start_trainer(python: str, chosen: dict, env: dict, directory: Path,
                  processes: list) -> tuple[subprocess.Popen, float]:
    """The trainer, once it runs at full speed, and the time it was seen to."""
    stem, ready = directory / "trainer", directory / "trainer.ready"
    trainer = launch(trainer_command(python, chosen, ready), env, stem)
    processes.append(trainer)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready.exists():
        if trainer.poll() is not None:
            raise failure(trainer, stem)
        if time.monotonic() > deadline:
            raise RuntimeError(f"the trainer was not running after {READY_TIMEOUT_S:g} s:\n"
                               f"{stem.with_suffix('.err').read_text()[-4000:]}")
        time.sleep(0.05)
    return trainer, time.monotonic()


def wait_bursts(python: str, chosen: dict, env: dict, directory: Path,
                processes: list) -> tuple[subprocess.Popen, bool]:
    """Runs the bursts program to its end or its time limit; the process and whether it ran out
    of time (its bursts so far still count)."""
    bursts = launch(bursts_command(python, chosen), env, directory / "bursts")
    processes.append(bursts)
    try:
        bursts.wait(bursts_timeout(chosen))
    except subprocess.TimeoutExpired:
        return bursts, True
    if bursts.returncode != 0:
        raise failure(bursts, directory / "bursts")
    return bursts, False


def bursts_alone(python: str, chosen: dict, env: dict, directory: Path) -> dict:
    directory.mkdir(parents=True)
    processes: list[subprocess.Popen] = []
    try:
        _, timed_out = wait_bursts(python, chosen, env, directory, processes)
    finally:
        stop(processes, STOP_GRACE_S)
    records = burst_records(output(directory / "bursts"))
    return {**bursts_figures(records, chosen["bursts"]), "timed_out": timed_out}


def trainer_alone(python: str, chosen: dict, env: dict, directory: Path) -> dict:
    directory.mkdir(parents=True)
    processes: list[subprocess.Popen] = []
    try:
        trainer, start = start_trainer(python, chosen, env, directory, processes)
        time.sleep(TRAINER_ALONE_S)
        end = time.monotonic()
        if trainer.poll() is not None:
            raise failure(trainer, directory / "trainer")
    finally:
        stop(processes, STOP_GRACE_S)
    return {"trainer_its": steps_per_s(step_times(output(directory / "trainer")), start, end),
            "window_s": end - start}


def together(python: str, chosen: dict, env: dict, directory: Path) -> dict:
    """The trainer, and the bursts beside it once it runs; the trainer is stopped after them."""
    directory.mkdir(parents=True, exist_ok=True)
    processes: list[subprocess.Popen] = []
    try:
        trainer, _ = start_trainer(python, chosen, env, directory, processes)
        bursts, timed_out = wait_bursts(python, chosen, env, directory, processes)
        outlived = trainer.poll() is None
        if not outlived and trainer.returncode != 0:
            raise failure(trainer, directory / "trainer")
    finally:
        stop(processes, STOP_GRACE_S)
    figures = together_figures(output(directory / "bursts"), output(directory / "trainer"),
                               chosen["bursts"], outlived)
    return {**figures, "timed_out": timed_out,
            "pids": {"trainer": trainer.pid, "bursts": bursts.pid}}


def shared(python: str, chosen: dict, library: Path, directory: Path, mode: str,
           args: list[str]) -> dict:
    """Both programs under a scheduler of their own; its log gives each one's lock events."""
    with private_scheduler(library, directory, args, tq=chosen["tq"],
                           anti_thrash=mode) as (scheduler, env):
        run = together(python, chosen, env, directory)
        scheduler.check_running()
    log = scheduler.log_path.read_text()
    keep_log(log, "BESIDE_LOGS", f"{directory.parent.name}-{directory.name}.log")
    return {**run, "scheduler": {"mode": mode, "tq": chosen["tq"], "args": args},
            "lock": {role: lock_events(log, pid) for role, pid in run["pids"].items()}}


def one_round(python: str, chosen: dict, library: Path, directory: Path, index: int) -> dict:
    plain = inherited()
    runs = {"bursts_alone": (bursts_alone, python, chosen, plain, directory / "bursts_alone"),
            "trainer_alone": (trainer_alone, python, chosen, plain, directory / "trainer_alone"),
            "no_layer": (together, python, chosen, plain, directory / "no_layer")}
    for name, mode, args in shared_runs(chosen, index):
        runs[name] = (shared, python, chosen, library, directory / name, mode, args)
    return {name: attempt(f"beside_trainer round {index + 1}, {name}", run_line, *run)
            for name, run in runs.items()}


def measure(python: str, library: Path, directory: Path, chosen: dict) -> dict:
    reason = refusal(free_mib())
    if reason:
        print(f"beside_trainer skipped: {reason}", file=sys.stderr)
        return {**chosen, "skipped": reason}
    rounds = [one_round(python, chosen, library, directory / f"round{index}", index)
              for index in range(chosen["rounds"])]
    return {**chosen, "rounds": rounds, "summary": summary(rounds)}
