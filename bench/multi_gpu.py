"""bench-gpu part `multi_gpu`: every GPU a program uses is scheduled. Needs two GPUs; with fewer
it is skipped, and says so.

- Two single-GPU programs on different GPUs (bench/gpu/matmul_steps.py on cuda:0 and cuda:1):
  each alone with no layer, then both at once under libnvs.so (mode `on`): each one's steps per
  second together over alone. A lock per device means neither waits for the other.
- Two data-parallel jobs of two ranks each (torchrun --standalone --nproc_per_node 2
  bench/gpu/ddp_steps.py), both on both GPUs: one after the other with no layer, against both at
  once under libnvs.so (mode `on`, TQ 10 s), where each job is a gang whose locks are granted
  and taken back together. Throughput ratio: the one-after-the-other time over the together
  time; grants, gang grants and revocations from the scheduler's log.

Environment: MULTI_GPU_STEPS (matmul steps, default 400), MULTI_GPU_DDP_STEPS (default 600).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from gpu_runs import attempt, inherited, launch, private_scheduler, stop
from scheduler_log import lock_events

HERE = Path(__file__).resolve().parent / "gpu"
TQ = 10
TIMEOUT_S = 600


def gpu_count() -> int:
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in listed.stdout.splitlines())


def run_all(commands: list[list[str]], env: dict, directory: Path) -> tuple[float, list[dict]]:
    """Start the commands at once; wall seconds until the last ends, and each one's JSON line."""
    directory.mkdir(parents=True, exist_ok=True)
    stems = [directory / f"run{i}" for i in range(len(commands))]
    processes = []
    try:
        started = time.perf_counter()
        processes = [launch(command, env, stem) for command, stem in zip(commands, stems)]
        for process in processes:
            process.wait(TIMEOUT_S)
        seconds = time.perf_counter() - started
    finally:
        stop(processes)
    results = []
    for process, stem in zip(processes, stems):
        if process.returncode != 0:
            raise RuntimeError(f"{' '.join(process.args)} exited {process.returncode}:\n"
                               f"{stem.with_suffix('.err').read_text()[-4000:]}")
        results.append(json.loads(stem.with_suffix(".out").read_text().strip().splitlines()[-1]))
    return seconds, results


def ddp_command(python: str, steps: int) -> list[str]:
    return [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            str(HERE / "ddp_steps.py"), str(steps)]


def measure(python: str, library: Path, directory: Path) -> dict:
    count = gpu_count()
    if count < 2:
        reason = f"needs two GPUs; nvidia-smi lists {count}"
        print(f"multi_gpu: skipped: {reason}", file=sys.stderr)
        return {"skipped": reason}
    steps = int(os.environ.get("MULTI_GPU_STEPS", "400"))
    ddp_steps = int(os.environ.get("MULTI_GPU_DDP_STEPS", "600"))
    matmul = [[python, str(HERE / "matmul_steps.py"), str(steps), str(gpu)] for gpu in (0, 1)]

    def apart() -> dict:
        alone = [run_all([command], inherited(), directory / f"alone{gpu}")[1][0]
                 for gpu, command in enumerate(matmul)]
        with private_scheduler(library, directory / "apart", tq=TQ) as (scheduler, env):
            _, together = run_all(matmul, env, directory / "apart-run")
            log = scheduler.log_path.read_text()
        return {"alone_steps_per_s": [run["steps_per_s"] for run in alone],
                "together_steps_per_s": [run["steps_per_s"] for run in together],
                "ratios": [t["steps_per_s"] / a["steps_per_s"] for t, a in zip(together, alone)],
                **lock_events(log)}

    def ddp_pair() -> dict:
        first = run_all([ddp_command(python, ddp_steps)], inherited(), directory / "ddp1")[0]
        second = run_all([ddp_command(python, ddp_steps)], inherited(), directory / "ddp2")[0]
        with private_scheduler(library, directory / "ddp", tq=TQ) as (scheduler, env):
            seconds, runs = run_all([ddp_command(python, ddp_steps)] * 2, env,
                                    directory / "ddp-run")
            log = scheduler.log_path.read_text()
        return {"one_after_another_s": first + second, "together_s": seconds,
                "throughput_ratio": (first + second) / seconds,
                "ranks_agree": all(run["ranks_agree"] for run in runs),
                "gang_grants": log.count("grant gang"), **lock_events(log)}

    return {"apart": attempt("apart", progress, apart),
            "ddp_pair": attempt("ddp_pair", progress, ddp_pair)}


def progress(name: str, run: dict) -> str:
    return f"multi_gpu {name}: {json.dumps(run)[:300]}"


def print_multi_gpu(results: dict) -> None:
    if "skipped" in results:
        print(f"multi_gpu: skipped ({results['skipped']})")
        return
    apart, ddp = results["apart"], results["ddp_pair"]
    if "ratios" in apart:
        print("two programs on two GPUs, together / alone: "
              + ", ".join(f"{ratio:.3f}" for ratio in apart["ratios"]))
    if "throughput_ratio" in ddp:
        print(f"two 2-rank DDP jobs on two GPUs: one after the other {ddp['one_after_another_s']:.1f}"
              f" s, together {ddp['together_s']:.1f} s (throughput {ddp['throughput_ratio']:.2f}x),"
              f" {ddp['gang_grants']} gang grants, {ddp['revocations']} revocations")
    for name, run in (("apart", apart), ("ddp_pair", ddp)):
        if "error" in run:
            print(f"multi_gpu {name}: {run['error']}")
