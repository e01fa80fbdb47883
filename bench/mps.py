"""bench-gpu part `mps`: programs that fit together, run at once through NVIDIA MPS.

Side by side in one run, on one GPU (bench/gpu/infer_loop.py, each request synchronized):
- loops: four small inference loops (12 conv layers of 64 channels, batch 4, fp16) with no
  layer, through MPS alone (a control daemon of the bench's own), under gemshare `auto`, and
  under gemshare `auto --mps`; the same for four loops of a larger model (24 layers of 256
  channels, batch 16, 64x64 images). Requests/s of all, each loop's median and p99, the slowest
  loop's rate over the fastest's.
- alone: one small loop with no layer and under `auto --mps` (what MPS costs a program alone).
- mixed: two small loops beside a trainer that does not fit with them (--capacity-mib), under
  `auto --mps`: the trainer gets its quanta and memory moves, the loops run through MPS between.
- classroom: six programs with a 0.4 s burst every 4 s (bench/gpu/matmul_bursts.py), started
  out of step (one every 0.67 s), beside a trainer that never pauses
  (bench/gpu/matmul_trainer.py): no layer; MPS alone with the trainer at below-normal priority
  (CUDA_MPS_CLIENT_PRIORITY=1 in its environment); `auto --mps`; and `auto --mps` with a rule
  for the trainer giving it an sm_share (MPS_TRAINER_SM_SHARE, default 50), or instead
  mps_priority = "low".

Environment: MPS_SECONDS (each loop's window, default 10), MPS_ROUNDS (default 1),
MPS_ONLY (a comma-separated subset of loops, large, alone, mixed, classroom; default all),
MPS_SETUPS (the setups of loops and large, of none, mps, auto, auto_mps; default all),
MPS_LOGS=DIR (keep every scheduler log there).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from beside_report import burst_records, step_times
from gpu_runs import attempt, inherited, keep_log, launch, private_scheduler, stop
from mps_daemon import running_daemon

from gemshare_nvs.wire.connection import Connection

HERE = Path(__file__).resolve().parent / "gpu"
SECONDS = float(os.environ.get("MPS_SECONDS", "10"))
ROUNDS = int(os.environ.get("MPS_ROUNDS", "1"))
SCENARIOS = ("loops", "large", "alone", "mixed", "classroom")
SMALL: list[str] = []  # the loop's defaults: 12 layers, 64 channels, batch 4, 32x32
LARGE = ["--layers", "24", "--channels", "256", "--batch", "16", "--size", "64"]
READY_TIMEOUT_S = 120.0
SETUPS = ("none", "mps", "auto", "auto_mps")
# The mixed run's trainer: 3 x 32768^2 x 4 bytes = 12 GiB; the capacity lets it run alone but
# not beside the loops, each of which the scheduler counts with its context reserve.
MIXED_SIZE, MIXED_CAPACITY_MIB = 32768, 13 * 1024
TRAINER_SM_SHARE = int(os.environ.get("MPS_TRAINER_SM_SHARE", "50"))
BURSTS, BURST_GAP_S, PROGRAMS = 5, 3.6, 6
STAGGER_S = (BURST_GAP_S + 0.4) / PROGRAMS  # one burst every 4 s each, out of step


@contextmanager
def setup(name: str, library: Path, directory: Path, **scheduler):
    """The environment a program runs in for setup `name`, and the scheduler if there is one."""
    if name == "none":
        yield inherited(), None
    elif name == "mps":
        with running_daemon(directory / "mps") as daemon:
            yield {**inherited(), "CUDA_MPS_PIPE_DIRECTORY": str(daemon.pipe)}, None
    else:
        args = ["--mps"] if name.endswith("_mps") else []
        args += scheduler.pop("args", [])
        with private_scheduler(library, directory, args, anti_thrash="auto",
                               **scheduler) as (sched, env):
            try:
                if "--mps" in args:
                    mps_answering(sched)
                yield env, sched
            finally:
                keep_log(sched.log_path.read_text(), "MPS_LOGS", f"{directory.name}.log")


def mps_answering(sched) -> None:
    """Until the scheduler's MPS control daemon answers: it comes up beside serving, and a
    program that registers before runs as a plain context."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        with Connection(sched.socket, timeout=10) as conn:
            mps = conn.request({"op": "status"})["status"]["mps"]
        if mps.get("running"):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the MPS control daemon did not answer: {mps.get('problem')}")
        time.sleep(0.1)


def mps_clients(sched) -> int | None:
    """How many of the scheduler's clients go through MPS now (None without a scheduler)."""
    if sched is None:
        return None
    with Connection(sched.socket, timeout=10) as conn:
        return conn.request({"op": "status"})["status"]["mps"].get("clients", 0)


def loops(python: str, env: dict, directory: Path, count: int, model: list[str], sched,
          extra: list[tuple[list[str], dict]] = ()) -> dict:
    """`count` inference loops started together (and `extra` programs beside them)."""
    directory.mkdir(parents=True, exist_ok=True)
    go = directory / "go"
    processes, stems = [], []
    try:
        for index in range(count):
            stem = directory / f"loop{index}"
            command = [python, str(HERE / "infer_loop.py"), *model, "--seconds", str(SECONDS),
                       "--ready", str(stem.with_suffix(".ready")), "--go", str(go)]
            processes.append(launch(command, env, stem))
            stems.append(stem)
        others = [launch(command, {**env, **more}, directory / f"other{index}")
                  for index, (command, more) in enumerate(extra)]
        processes += others
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not all(stem.with_suffix(".ready").exists() for stem in stems):
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                raise RuntimeError("a loop did not start: " + " | ".join(
                    stem.with_suffix(".err").read_text()[-500:] for stem in stems))
            time.sleep(0.05)
        through = mps_clients(sched)
        go.touch()
        for process in processes[:count]:
            process.wait(SECONDS + 60)
        results = [eval_json(stem) for stem in stems]
    finally:
        stop(processes, grace_s=5)
    rates = [r["rate"] for r in results]
    return {"rate": round(sum(rates), 1), "loops": results,
            "slowest_over_fastest": round(min(rates) / max(rates), 3),
            "median_ms": round(statistics.median(r["median_ms"] for r in results), 3),
            "p99_ms_max": max(r["p99_ms"] for r in results), "through_mps": through}


def eval_json(stem: Path) -> dict:
    lines = [line for line in stem.with_suffix(".out").read_text().splitlines()
             if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"{stem.name} printed nothing: {stem.with_suffix('.err').read_text()}")
    return json.loads(lines[-1])


def line(name: str, run: dict) -> str:
    if "error" in run:
        return f"  {name}: {run['error'][:300]}"
    return (f"  {name}: {run['rate']:,.0f} req/s, median {run['median_ms']} ms, p99 max "
            f"{run['p99_ms_max']} ms, slowest/fastest {run['slowest_over_fastest']}, "
            f"through MPS {run['through_mps']}")


def loop_setups(environ=os.environ) -> list[str]:
    chosen = [name.strip() for name in environ.get("MPS_SETUPS", ",".join(SETUPS)).split(",")
              if name.strip()]
    if not chosen or set(chosen) - set(SETUPS):
        raise ValueError(f"MPS_SETUPS must be a comma-separated list of {', '.join(SETUPS)}")
    return chosen


def median_rate(runs: list[dict]) -> float | None:
    rates = [run["rate"] for run in runs if "rate" in run]
    return statistics.median(rates) if rates else None


def loop_scenario(python: str, library: Path, directory: Path, model: list[str]) -> dict:
    """Each setup's rounds, and `auto_mps_over_mps`: the median requests/s of all four loops
    under gemshare `auto --mps` over that through MPS alone."""
    names = loop_setups()
    runs: dict[str, list] = {name: [] for name in names}
    for round_ in range(ROUNDS):
        for name in names:
            where = directory / f"{name}-{round_}"
            with setup(name, library, where) as (env, sched):
                runs[name].append(attempt(name, line, loops, python, env, where / "run", 4,
                                          model, sched))
    ours, theirs = median_rate(runs.get("auto_mps", [])), median_rate(runs.get("mps", []))
    return {**runs, "auto_mps_over_mps": round(ours / theirs, 3) if ours and theirs else None}


def alone_scenario(python: str, library: Path, directory: Path) -> dict:
    runs: dict[str, list] = {"none": [], "auto_mps": []}
    for round_ in range(max(ROUNDS, 3)):  # a 2% question needs more than one sample
        for name in runs:
            where = directory / f"{name}-{round_}"
            with setup(name, library, where) as (env, sched):
                runs[name].append(attempt(name, line, loops, python, env, where / "run", 1,
                                          SMALL, sched))
    rates = {name: statistics.median(r["rate"] for r in rs if "rate" in r)
             for name, rs in runs.items() if any("rate" in r for r in rs)}
    return {**runs, "ratio": round(rates["auto_mps"] / rates["none"], 3)
            if len(rates) == 2 else None}


def mixed_scenario(python: str, library: Path, directory: Path) -> dict:
    trainer = [python, str(HERE / "matmul_trainer.py"), "--size", str(MIXED_SIZE),
               "--max-seconds", str(SECONDS + 90)]
    where = directory / "auto_mps"
    with setup("auto_mps", library, where, capacity_mib=MIXED_CAPACITY_MIB, tq=5) as (env, sched):
        run = attempt("mixed", line, loops, python, env, where / "run", 2, SMALL, sched,
                      [(trainer, {})])
        steps = step_times((where / "run" / "other0.out").read_text()) \
            if "error" not in run else []
        run["trainer_steps"] = len(steps)
        log = sched.log_path.read_text()
        run["scheduler_moves"] = log.count("moved client")
    return run


def trainer_rule(directory: Path, name: str, term: str) -> list[str]:
    """The scheduler arguments of a config file whose one rule gives the trainer `term`."""
    config = directory / f"{name}.toml"
    config.write_text(f'[[rule]]\nmatch = {{ label = "trainer" }}\n{term}\n')
    return ["--config", str(config)]


def classroom_scenario(python: str, library: Path, directory: Path) -> dict:
    directory.mkdir(parents=True, exist_ok=True)
    result = {"bursts_alone": classroom(python, library, directory / "alone", "none", 1, False)}
    result["trainer_alone"] = classroom(python, library, directory / "trainer", "none", 0, True)
    sm_share = f"trainer_sm{TRAINER_SM_SHARE}"
    # (result, setup, scheduler arguments, what the trainer's environment adds)
    runs = (("none", "none", None, {}),
            ("mps_trainer_low", "mps", None, {"CUDA_MPS_CLIENT_PRIORITY": "1"}),
            ("auto_mps", "auto_mps", [], {}),
            (f"auto_mps_{sm_share}", "auto_mps",
             trainer_rule(directory, sm_share, f"sm_share = {TRAINER_SM_SHARE}"), {}),
            ("auto_mps_trainer_low", "auto_mps",
             trainer_rule(directory, "trainer_low", 'mps_priority = "low"'), {}))
    for name, kind, args, trainer_env in runs:
        result[name] = classroom(python, library, directory / name, kind, PROGRAMS, True, args,
                                 trainer_env)
    alone = result["bursts_alone"].get("burst_median_s")
    trainer = result["trainer_alone"].get("trainer_steps_per_s")
    for entry in result.values():
        if alone and entry.get("burst_median_s"):
            entry["bursts_over_alone"] = {"median": round(entry["burst_median_s"] / alone, 2),
                                          "max": round(entry["burst_max_s"] / alone, 2)}
        if trainer and entry.get("trainer_steps_per_s") and entry is not result["trainer_alone"]:
            entry["trainer_of_alone"] = round(entry["trainer_steps_per_s"] / trainer, 3)
    return result


def classroom(python: str, library: Path, where: Path, name: str, programs: int,
              with_trainer: bool, args: list[str] | None = None,
              trainer_env: dict | None = None) -> dict:
    """`programs` burst programs beside the trainer (if `with_trainer`) under setup `name`;
    `args` are its scheduler's (None where it has none)."""
    options = {} if args is None else {"args": list(args)}
    directory = where / "run"  # the programs' output; `where` is the scheduler's
    with setup(name, library, where, **options) as (env, sched):
        directory.mkdir(parents=True)
        processes: list = []
        try:
            if with_trainer:
                ready = directory / "trainer.ready"
                processes.append(launch([python, str(HERE / "matmul_trainer.py"), "--ready",
                                         str(ready), "--max-seconds", "300"],
                                        {**env, "GEMSHARE_LABEL": "trainer",
                                         **(trainer_env or {})},
                                        directory / "trainer"))
                deadline = time.monotonic() + READY_TIMEOUT_S
                while not ready.exists():
                    if time.monotonic() > deadline or processes[0].poll() is not None:
                        raise RuntimeError((directory / "trainer.err").read_text()[-500:])
                    time.sleep(0.05)
            began = time.monotonic()
            bursts = []
            for index in range(programs):  # spread over the period, as users come and go
                bursts.append(launch([python, str(HERE / "matmul_bursts.py"), "--bursts",
                                      str(BURSTS), "--gap-s", str(BURST_GAP_S)], env,
                                     directory / f"bursts{index}"))
                time.sleep(STAGGER_S)
            processes += bursts
            time.sleep(SECONDS if programs == 0 else min(SECONDS, BURSTS * BURST_GAP_S / 2))
            through = mps_clients(sched)  # while every program runs
            for process in bursts:
                process.wait(READY_TIMEOUT_S + BURSTS * (BURST_GAP_S + 30))
            ended = time.monotonic()
        finally:
            stop(processes, grace_s=5)
    entry: dict = {"through_mps": through}
    seconds = [record["seconds"] for index in range(programs)
               for record in burst_records((directory / f"bursts{index}.out").read_text())]
    if seconds:
        entry.update(burst_median_s=round(statistics.median(seconds), 3),
                     burst_max_s=round(max(seconds), 3), bursts=len(seconds))
    if with_trainer:
        steps = [t for t in step_times((directory / "trainer.out").read_text())
                 if began <= t <= ended]
        entry["trainer_steps_per_s"] = round(len(steps) / (ended - began), 3)
    print(f"  classroom {where.name}: {entry}", file=sys.stderr, flush=True)
    return entry


def measure(python: str, library: Path, directory: Path) -> dict:
    chosen = [s.strip() for s in os.environ.get("MPS_ONLY", ",".join(SCENARIOS)).split(",")
              if s.strip()]
    results: dict = {"seconds": SECONDS, "rounds": ROUNDS}
    parts = {"loops": lambda: loop_scenario(python, library, directory / "loops", SMALL),
             "large": lambda: loop_scenario(python, library, directory / "large", LARGE),
             "alone": lambda: alone_scenario(python, library, directory / "alone"),
             "mixed": lambda: mixed_scenario(python, library, directory / "mixed"),
             "classroom": lambda: classroom_scenario(python, library, directory / "classroom")}
    for name in chosen:
        print(f"mps: {name}", file=sys.stderr, flush=True)
        try:
            results[name] = parts[name]()
        except Exception as exc:  # one scenario's failure keeps the others' figures
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return results
