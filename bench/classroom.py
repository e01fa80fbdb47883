"""bench-gpu part `classroom`: six notebooks beside a trainer, their bursts in step (all at the
same moments, as a class running the same cell) and out of step (their moments spread over the
period), under `on` at TQ 5 and under `auto --mps` with a config rule giving the trainer
mps_priority = "low".

Each notebook is bench/gpu/matmul_bursts.py on a timetable (a burst of 20 fp32 8192^2 matmuls,
about 0.43 s alone, every PERIOD s from one common start); the trainer is
bench/gpu/matmul_trainer.py (one such matmul a step, never pausing), labelled "trainer" for the
rule. References, with no layer: one notebook alone (its bursts' median) and the trainer alone
(its steps per second over TRAINER_ALONE_S). Every burst of every notebook counts, the first
ones included. Figures per run: each notebook's burst median, the worst of them over the
notebook alone (`burst_ratio`: every notebook must stay near its time alone), the trainer's
steps per second from the first burst's moment to the last one's end over alone
(`trainer_share`), and whether every burst ended (`complete`).

Environment: CLASSROOM_PROGRAMS (default 6), CLASSROOM_BURSTS (each, default 5),
CLASSROOM_PERIOD_S (default 4), CLASSROOM_SETUPS (default "on,auto_mps_low"; "none" adds the
programs with no layer), CLASSROOM_ARRANGEMENTS (default "in_step,out_of_step"),
CLASSROOM_LOGS=DIR (keep each scheduler's log there). The `auto --mps` runs need
nvidia-cuda-mps-control on PATH: the scheduler starts its own daemon, with a pipe directory of
its own, and quits it when it stops.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from beside_report import burst_records, step_times, steps_per_s
from gpu_runs import (attempt, free_mib, inherited, keep_log, launch, private_scheduler, stop,
                      too_little_free)
from mps import mps_answering, trainer_rule

HERE = Path(__file__).resolve().parent / "gpu"
TQ = 5
SETUPS = ("none", "on", "auto_mps_low")
ARRANGEMENTS = ("in_step", "out_of_step")
TRAINER_ALONE_S = 10.0
READY_TIMEOUT_S = 120.0  # PyTorch's start-up for seven programs at once, and a first grant
START_MARGIN_S = 1.0  # from everyone ready to the common start
BURST_SLACK_S = 20.0  # what a run may take past its last burst's moment before it is stopped
STOP_GRACE_S = 5.0
# Seven programs of about 0.8 GiB of tensors and their contexts: some 10 GiB in all. A shared
# card keeps its other users' room: the part runs only with twice that free.
FREE_MIB_MIN = 20480


def settings(environ=os.environ) -> dict:
    """The part's settings from the environment; stops with what is wrong before anything runs."""
    try:
        chosen = {"programs": int(environ.get("CLASSROOM_PROGRAMS", "6")),
                  "bursts": int(environ.get("CLASSROOM_BURSTS", "5")),
                  "period_s": float(environ.get("CLASSROOM_PERIOD_S", "4"))}
    except ValueError as exc:
        raise SystemExit(f"CLASSROOM_PROGRAMS, _BURSTS and _PERIOD_S must be numbers ({exc})")
    setups = [s.strip() for s in environ.get("CLASSROOM_SETUPS", "on,auto_mps_low").split(",")
              if s.strip()]
    arrangements = [a.strip() for a in environ.get("CLASSROOM_ARRANGEMENTS",
                                                    ",".join(ARRANGEMENTS)).split(",")
                    if a.strip()]
    if chosen["programs"] < 1 or chosen["bursts"] < 1 or chosen["period_s"] <= 0 or \
            not setups or set(setups) - set(SETUPS) or not arrangements or \
            set(arrangements) - set(ARRANGEMENTS):
        raise SystemExit("CLASSROOM_PROGRAMS and _BURSTS must be at least 1, _PERIOD_S more "
                         f"than 0, CLASSROOM_SETUPS a comma-separated list of {', '.join(SETUPS)}"
                         f", CLASSROOM_ARRANGEMENTS of {', '.join(ARRANGEMENTS)}")
    return {**chosen, "setups": setups, "arrangements": arrangements, "tq": TQ}


def offsets(arrangement: str, programs: int, period_s: float) -> list[float]:
    """Each notebook's first moment after the common start."""
    if arrangement == "in_step":
        return [0.0] * programs
    return [index * period_s / programs for index in range(programs)]


def refusal(free: list[int]) -> str | None:
    return too_little_free(free, FREE_MIB_MIN)


@contextmanager
def environment(setup: str, library: Path, directory: Path):
    """The environment the programs of `setup` run in; a scheduler of its own, if any."""
    if setup == "none":
        directory.mkdir(parents=True)
        yield inherited()
        return
    args = []
    if setup == "auto_mps_low":
        directory.mkdir(parents=True)
        args = ["--mps", *trainer_rule(directory, "trainer_low", 'mps_priority = "low"')]
    with private_scheduler(library, directory / "scheduler", args, tq=TQ,
                           anti_thrash="on" if setup == "on" else "auto") as (scheduler, env):
        try:
            if "--mps" in args:
                mps_answering(scheduler)
            yield env
            scheduler.check_running()
        finally:
            keep_log(scheduler.log_path.read_text(), "CLASSROOM_LOGS",
                     f"{directory.parent.name}-{directory.name}.log")


def wait_ready(paths: list[Path], processes: list, directory: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not all(path.exists() for path in paths):
        if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
            tails = [path.read_text()[-600:] for path in sorted(directory.glob("*.err"))]
            raise RuntimeError("a program did not get ready: " + " | ".join(tails))
        time.sleep(0.05)


def run(python: str, env: dict, directory: Path, chosen: dict, moments: list[float],
        with_trainer: bool) -> dict:
    """Notebooks at `moments` after one common start (and the trainer, started first, beside
    them); what each printed, read back into figures."""
    directory.mkdir(parents=True, exist_ok=True)
    go = directory / "go"
    processes: list = []
    try:
        ready = []
        if with_trainer:
            ready.append(directory / "trainer.ready")
            processes.append(launch([python, str(HERE / "matmul_trainer.py"), "--ready",
                                     str(ready[0]), "--max-seconds", "600"],
                                    {**env, "GEMSHARE_LABEL": "trainer"}, directory / "trainer"))
            wait_ready(ready, processes, directory)  # at full speed before anyone else starts
        for index, offset in enumerate(moments):
            ready.append(directory / f"notebook{index}.ready")
            processes.append(launch(
                [python, str(HERE / "matmul_bursts.py"), "--bursts", str(chosen["bursts"]),
                 "--period-s", str(chosen["period_s"]), "--offset-s", str(offset),
                 "--ready", str(ready[-1]), "--go", str(go)],
                {**env, "GEMSHARE_LABEL": "notebook"}, directory / f"notebook{index}"))
        wait_ready(ready, processes, directory)
        staged = directory / "go.new"  # renamed into place: nobody reads half of it
        staged.write_text(repr(time.monotonic() + START_MARGIN_S))
        staged.rename(go)
        last = START_MARGIN_S + max(moments) + (chosen["bursts"] - 1) * chosen["period_s"]
        deadline = time.monotonic() + last + BURST_SLACK_S
        notebooks = processes[1:] if with_trainer else processes
        for process in notebooks:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:  # its bursts so far count, the rest are missing
                break
        outlived = with_trainer and processes[0].poll() is None
        check_exits(processes, directory, with_trainer)
    finally:
        stop(processes, STOP_GRACE_S)
    outputs = [(directory / f"notebook{index}.out").read_text() for index in range(len(moments))]
    trainer = (directory / "trainer.out").read_text() if with_trainer else None
    result = figures(outputs, trainer, chosen["bursts"])
    return {**result, "trainer_outlived_bursts": outlived} if with_trainer else result


def check_exits(processes: list, directory: Path, with_trainer: bool) -> None:
    """Raises, with its last words, for a program that failed on its own: a notebook that
    crashed did not merely run out of time."""
    names = (["trainer"] if with_trainer else []) + [
        f"notebook{index}" for index in range(len(processes) - with_trainer)]
    for process, name in zip(processes, names):
        if process.poll() not in (None, 0):
            raise RuntimeError(f"{' '.join(process.args)} exited {process.returncode}:\n"
                               f"{(directory / f'{name}.err').read_text()[-4000:]}")


def figures(outputs: list[str], trainer: str | None, wanted: int) -> dict:
    """The notebooks' bursts (every one, first ones included) and the trainer's steps per second
    from the first burst's moment to the last one's end: the time they had to share."""
    programs = [burst_records(text) for text in outputs]
    every = [record for records in programs for record in records]
    medians = [statistics.median(r["seconds"] for r in records) if records else None
               for records in programs]
    result = {"bursts_done": len(every), "bursts_wanted": wanted * len(outputs),
              "complete": len(every) == wanted * len(outputs),
              "burst_median_s": statistics.median(r["seconds"] for r in every) if every else None,
              "burst_max_s": max((r["seconds"] for r in every), default=None),
              "program_medians_s": medians,
              "worst_program_median_s": None if None in medians or not medians else max(medians)}
    if trainer is not None:
        start = min((r["start"] for r in every), default=None)
        end = max((r["start"] + r["seconds"] for r in every), default=None)
        result["trainer_its"] = None if start is None else \
            steps_per_s(step_times(trainer), start, end)
    return result


def trainer_alone(python: str, env: dict, directory: Path) -> dict:
    directory.mkdir(parents=True)
    processes: list = []
    try:
        ready = directory / "trainer.ready"
        processes.append(launch([python, str(HERE / "matmul_trainer.py"), "--ready", str(ready),
                                 "--max-seconds", "120"], env, directory / "trainer"))
        wait_ready([ready], processes, directory)
        start = time.monotonic()
        time.sleep(TRAINER_ALONE_S)
        end = time.monotonic()
    finally:
        stop(processes, STOP_GRACE_S)
    return {"trainer_its": steps_per_s(step_times((directory / "trainer.out").read_text()),
                                       start, end)}


def shared(python: str, library: Path, directory: Path, chosen: dict, setup: str,
           arrangement: str) -> dict:
    with environment(setup, library, directory) as env:
        return run(python, env, directory / "run", chosen,
                   offsets(arrangement, chosen["programs"], chosen["period_s"]), True)


def against_alone(entry: dict, alone_burst: float | None, alone_its: float | None) -> dict:
    """A run's figures over the references: the worst notebook's median over a notebook alone,
    the trainer's speed over alone."""
    worst, its = entry.get("worst_program_median_s"), entry.get("trainer_its")
    return {**entry,
            "burst_ratio": worst / alone_burst if worst is not None and alone_burst else None,
            "trainer_share": its / alone_its if its is not None and alone_its else None}


def run_line(name: str, entry: dict) -> str:
    if "error" in entry:
        lines = entry["error"].strip().splitlines()
        return f"classroom {name}: FAILED ({' ... '.join(dict.fromkeys([lines[0], lines[-1]]))})"
    parts = []
    if entry.get("burst_median_s") is not None:
        parts.append(f"bursts median {entry['burst_median_s']:.3f} s, worst notebook's median "
                     f"{entry['worst_program_median_s']:.3f} s, slowest "
                     f"{entry['burst_max_s']:.3f} s, {entry['bursts_done']} of "
                     f"{entry['bursts_wanted']} done")
    if entry.get("trainer_its") is not None:
        parts.append(f"trainer {entry['trainer_its']:.1f} it/s")
    if entry.get("burst_ratio") is not None:
        parts.append(f"worst notebook {entry['burst_ratio']:.2f}x alone")
    if entry.get("trainer_share") is not None:
        parts.append(f"trainer {entry['trainer_share']:.0%} of alone")
    if entry.get("trainer_outlived_bursts") is False:
        parts.append("TRAINER ENDED FIRST")
    return f"classroom {name}: " + "; ".join(parts or ["no figures"])


def measure(python: str, library: Path, directory: Path, chosen: dict) -> dict:
    reason = refusal(free_mib())
    if reason:
        print(f"classroom skipped: {reason}", file=sys.stderr)
        return {**chosen, "skipped": reason}
    plain = inherited()
    result = {**chosen,
              "bursts_alone": attempt("notebook alone", run_line, run, python, plain,
                                      directory / "bursts_alone", chosen, [0.0], False),
              "trainer_alone": attempt("trainer alone", run_line, trainer_alone, python, plain,
                                       directory / "trainer_alone")}
    alone_burst = result["bursts_alone"].get("burst_median_s")
    alone_its = result["trainer_alone"].get("trainer_its")
    for arrangement in chosen["arrangements"]:
        result[arrangement] = {}
        for setup in chosen["setups"]:
            name = f"{arrangement}, {setup}"
            entry = attempt(name, run_line, shared, python, library,
                            directory / arrangement / setup, chosen, setup, arrangement)
            result[arrangement][setup] = entry if "error" in entry else \
                against_alone(entry, alone_burst, alone_its)
    return result


def print_classroom(part: dict) -> None:
    if "skipped" in part:
        print(f"classroom: skipped ({part['skipped']})")
        return
    print(f"classroom: {part['programs']} notebooks, {part['bursts']} bursts each every "
          f"{part['period_s']:g} s, beside a trainer; TQ {part['tq']} s")
    print("  " + run_line("notebook alone", part["bursts_alone"]))
    print("  " + run_line("trainer alone", part["trainer_alone"]))
    for arrangement in part["arrangements"]:
        for setup, entry in part.get(arrangement, {}).items():
            print("  " + run_line(f"{arrangement}, {setup}", entry))
