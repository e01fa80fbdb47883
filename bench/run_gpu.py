"""make bench-gpu: libnvs.so against no sharing layer on a real GPU; prints a table, writes JSON.

Environment: BENCH_JSON=path (write the results there), BENCH_PYTHON (the Python with PyTorch
for the workloads; default: this one), BENCH_ROUNDS (A/B rounds, default 7), SWAP_GIB (default 4;
keep it well under 8 and under the card's free memory), BENCH_ONLY (a comma-separated subset of
launch_rate, train_steps, swapin, interactive, two_jobs_s, oversub, notebooks, memory_limit,
beside_trainer, multi_gpu, mps, classroom, llm_servers; default all), BENCH_SET (1, 2, 3 or all: the parts and
settings of the scenario registry's commands, bench/scenarios.py; what the environment sets
besides wins);
OVERSUB_GIB, OVERSUB_PASSES, OVERSUB_CAPACITY_MIB and OVERSUB_GAPS for the part oversub
(bench/oversub.py); NOTEBOOKS_* for the part notebooks (bench/notebooks.py); MEMLIMIT_* for
the part memory_limit (bench/memory_limit.py, which needs memory cgroups); BESIDE_* for the
part beside_trainer (bench/beside_trainer.py); MULTI_GPU_* for the part multi_gpu
(bench/multi_gpu.py, which needs two GPUs); MPS_* for the part mps (bench/mps.py, which needs
nvidia-cuda-mps-control on PATH); CLASSROOM_* for the part classroom (bench/classroom.py, whose
`auto --mps` runs need it too); LLM_* for the part llm_servers (bench/llm_servers.py, whose
servers need `transformers` beside PyTorch). Before the parts it times the machine's first
migration to the host, which it pays once (bench/first_migration.py). After the parts' lines, the
registry's table: scenario by bound, figure, bound and verdict (bench/scenario_table.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenarios import set_settings  # noqa: E402


def apply_set(environ=os.environ) -> None:
    """BENCH_SET's parts and settings, before the parts read theirs; the caller's own win."""
    which = environ.get("BENCH_SET", "").strip()
    if not which:
        return
    try:
        chosen = set_settings(which)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    for name, value in chosen.items():
        environ.setdefault(name, value)


if __name__ == "__main__":
    apply_set()

import beside_trainer  # noqa: E402
import classroom  # noqa: E402
import first_migration  # noqa: E402
import llm_servers  # noqa: E402
import memory_limit  # noqa: E402
import mps  # noqa: E402
import multi_gpu  # noqa: E402
import notebooks  # noqa: E402
import oversub  # noqa: E402
from ab import interleave, run_json  # noqa: E402
from beside_report import print_beside  # noqa: E402
from scenario_table import print_registry  # noqa: E402
from scheduler_process import SchedulerProcess  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent / "gpu"
BUILD = Path(os.environ.get("GEMSHARE_BUILD_DIR", REPO / "build"))
PYTHON = os.environ.get("BENCH_PYTHON", sys.executable)
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "7"))
SWAP_GIB = os.environ.get("SWAP_GIB", "4")


def build_launch_rate() -> Path:
    binary = BUILD / "bench" / "launch_rate"
    binary.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["nvcc", "-O2", "-o", str(binary), str(HERE / "launch_rate.cu")], check=True)
    return binary


def on_one_cpu(command: list[str]) -> list[str]:
    """The command pinned to one CPU, the same for every run: what a launch costs the host moves
    with the core it lands on and that core's clock, by far more than what libnvs adds."""
    taskset = shutil.which("taskset")
    return [taskset, "-c", str(max(os.sched_getaffinity(0))), *command] if taskset else command


def environment() -> dict:
    query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,memory.used",
             "--format=csv,noheader"]
    gpu = subprocess.run(query, capture_output=True, text=True).stdout.strip()
    torch = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__, "
                            "torch.version.cuda)"], capture_output=True, text=True).stdout.split()
    return {"gpu": gpu, "torch": torch[0] if torch else None,
            "torch_cuda": torch[1] if len(torch) > 1 else None, "date": date.today().isoformat()}


def start_json(command: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(command, env={**os.environ, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish_json(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=600)
    if process.returncode != 0:
        raise RuntimeError(f"{process.args} exited {process.returncode}:\n{err[-4000:]}")
    return json.loads(out.strip().splitlines()[-1])


def interactive_beside_trainer(env: dict) -> dict:
    """A trainer for 60 s; 3 s in, an interactive process makes 8 bursts 2 s apart.

    In mode on with TQ 5 each burst waits ~3 s for the trainer's quantum, so the user needs ~50 s:
    the trainer must outlive it, or the last bursts would run alone and look fast."""
    trainer = start_json([PYTHON, str(HERE / "train_steps.py"), "--seconds", "60"], env)
    try:
        time.sleep(3)
        user = finish_json(start_json([PYTHON, str(HERE / "interactive.py"), "8", "2"], env))
        outlived = trainer.poll() is None
        return {**user, "trainer_outlived_user": outlived,
                "trainer_steps_per_s": finish_json(trainer)["steps_per_s"]}
    finally:
        if trainer.poll() is None:  # only if something above raised
            trainer.kill()
            trainer.wait()


def two_jobs(env: dict, together: bool) -> float:
    """Wall seconds for two 1500-step training jobs, run together or one after the other."""
    command = [PYTHON, str(HERE / "train_steps.py"), "1500"]
    start = time.perf_counter()
    if together:
        jobs = [start_json(command, env), start_json(command, env)]
        for job in jobs:
            finish_json(job)
    else:
        for _ in range(2):
            run_json(command, env)
    return time.perf_counter() - start


@contextmanager
def sharing(library: Path, directory: Path, tq: int, anti_thrash: str = "on"):
    """A scheduler for the block's runs; yields the environment that runs a program under it."""
    directory.mkdir()
    scheduler = SchedulerProcess(directory, tq=tq, anti_thrash=anti_thrash)
    try:
        yield {"LD_PRELOAD": str(library), "GEMSHARE_SOCKET": str(scheduler.socket)}
        scheduler.check_running()  # had it exited, the runs under it measured nothing
    finally:
        scheduler.stop()


# What BENCH_ONLY may name (comma-separated); all of them by default.
PARTS = ("launch_rate", "train_steps", "swapin", "interactive", "two_jobs_s", "oversub",
         "notebooks", "memory_limit", "beside_trainer", "multi_gpu", "mps", "classroom",
         "llm_servers")


def chosen_parts() -> set[str]:
    wanted = {part.strip() for part in os.environ.get("BENCH_ONLY", "").split(",") if part.strip()}
    if wanted - set(PARTS):
        raise SystemExit(f"BENCH_ONLY names {', '.join(sorted(wanted - set(PARTS)))}; "
                         f"choose from {', '.join(PARTS)}")
    return wanted or set(PARTS)


def leave(signum: int, _frame) -> None:
    """SIGTERM (a time limit) ends the bench as an exception would, so that the runs' cleanups
    stop the programs and schedulers they started: none is left holding a shared card."""
    signal.signal(signum, signal.SIG_IGN)  # a second one must not cut those cleanups short
    sys.exit(128 + signum)


def main() -> int:
    parts = chosen_parts()
    beside = beside_trainer.settings() if "beside_trainer" in parts else None
    lesson = classroom.settings() if "classroom" in parts else None
    try:  # before anything runs, as for the other parts' settings
        if "mps" in parts:
            mps.loop_setups()
        if "llm_servers" in parts:
            llm_servers.settings()
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    signal.signal(signal.SIGTERM, leave)
    library = BUILD / "libnvs.so"
    if not library.exists():
        subprocess.run(["make", "-C", str(REPO), "lib"], check=True)
    if shutil.which("nvidia-smi") is None:
        print("bench-gpu needs an NVIDIA GPU and nvidia-smi", file=sys.stderr)
        return 2
    results = {"environment": environment()}
    # Paid here once, so that no part pays the machine's warm-up (first_migration.py).
    results["first_migration"] = first_migration.measure(BUILD)
    print(first_migration.line(results["first_migration"]), flush=True)
    took = results["part_seconds"] = {}  # how long each part ran: what sizes BENCH_SET's sets
    began = time.monotonic()
    plain: dict = {}
    with tempfile.TemporaryDirectory(prefix="gs-bench-", dir="/tmp") as directory:
        directory = Path(directory)
        with sharing(library, directory / "tq30", 30) as shared:
            if "launch_rate" in parts:
                # ~2 s a run, and the ratio of two medians is only as tight as the rounds allow.
                results["launch_rate"] = interleave(on_one_cpu([str(build_launch_rate())]),
                                                    "launches_per_s",
                                                    4 * ROUNDS + 1, plain, shared)
                began = lap(took, "launch_rate", began)
            if "train_steps" in parts:
                results["train_steps"] = interleave([PYTHON, str(HERE / "train_steps.py")],
                                                    "steps_per_s", ROUNDS, plain, shared)
                began = lap(took, "train_steps", began)
            if "swapin" in parts:
                swap = [PYTHON, str(HERE / "swapin.py")]
                on_grant = [PYTHON, str(HERE / "swap_on_grant.py"), SWAP_GIB]
                overlap = run_json(on_grant, {**shared, "GEMSHARE_SWAP_IN_WAIT": "0"})
                results["swapin"] = {
                    **run_json(swap + ["managed", SWAP_GIB], shared),
                    **run_json(swap + ["pinned", SWAP_GIB], plain),
                    **run_json(on_grant, shared),
                    # Kernels let run beside the bulk move rather than after it.
                    **{f"{key}_overlap": value for key, value in overlap.items()
                       if key.startswith("on_grant")}}
        if parts & {"interactive", "two_jobs_s"}:
            # Two schedulers side by side, each with its own socket: on (one holder at a time)
            # and auto (holders that fit in memory together share the GPU).
            with sharing(library, directory / "tq5", 5) as on_tq5, \
                    sharing(library, directory / "auto_tq5", 5, anti_thrash="auto") as auto_tq5:
                if "interactive" in parts:
                    results["interactive"] = {
                        "no_layer": interactive_beside_trainer(plain),
                        "libnvs_tq5": interactive_beside_trainer(on_tq5),
                        "libnvs_auto_tq5": interactive_beside_trainer(auto_tq5)}
                if "two_jobs_s" in parts:
                    results["two_jobs_s"] = {
                        "one_after_another": two_jobs(plain, together=False),
                        "together_libnvs_tq5": two_jobs(on_tq5, together=True),
                        "together_libnvs_auto_tq5": two_jobs(auto_tq5, together=True),
                        "together_no_layer": two_jobs(plain, together=True)}
        began = time.monotonic()
        if "oversub" in parts:
            results["oversub"] = oversub.measure(PYTHON, library, directory / "oversub")
            began = lap(took, "oversub", began)
        if "notebooks" in parts:
            results["notebooks"] = notebooks.measure(PYTHON, library, directory / "notebooks")
            began = lap(took, "notebooks", began)
        if "memory_limit" in parts:
            results["memory_limit"] = memory_limit.measure(PYTHON, library,
                                                           directory / "memory_limit")
            began = lap(took, "memory_limit", began)
        if beside is not None:
            results["beside_trainer"] = beside_trainer.measure(
                PYTHON, library, directory / "beside_trainer", beside)
            began = lap(took, "beside_trainer", began)
        if "multi_gpu" in parts:
            results["multi_gpu"] = multi_gpu.measure(PYTHON, library, directory / "multi_gpu")
            began = lap(took, "multi_gpu", began)
        if "mps" in parts:
            results["mps"] = mps.measure(PYTHON, library, directory / "mps")
            began = lap(took, "mps", began)
        if lesson is not None:
            results["classroom"] = classroom.measure(PYTHON, library, directory / "classroom",
                                                     lesson)
            began = lap(took, "classroom", began)
        if "llm_servers" in parts:
            results["llm_servers"] = llm_servers.measure(PYTHON, library,
                                                         directory / "llm_servers")
            began = lap(took, "llm_servers", began)
    print_table(results)
    results["registry"] = print_registry(results)
    if os.environ.get("BENCH_JSON"):
        Path(os.environ["BENCH_JSON"]).write_text(json.dumps(results, indent=2))
    return 0


def lap(took: dict, part: str, began: float) -> float:
    """Records how long the part took; the start of the next."""
    now = time.monotonic()
    took[part] = round(now - began, 1)
    print(f"{part}: {took[part]:.0f} s", file=sys.stderr, flush=True)
    return now


def print_table(results: dict) -> None:
    env = results["environment"]
    print(f"\n{env['gpu']} | torch {env['torch']} (CUDA {env['torch_cuda']}) | {env['date']}")
    if "first_migration" in results:
        print(first_migration.line(results["first_migration"]))
    print(f"{'benchmark':<28}{'plain':>14}{'libnvs':>14}{'libnvs/plain':>14}")
    for name in ("launch_rate", "train_steps"):
        if name in results:
            row = results[name]
            print(f"{name + ' (' + row['metric'] + ')':<28}{row['median_a']:>14.1f}"
                  f"{row['median_b']:>14.1f}{row['ratio_b_over_a']:>14.4f}")
    if "launch_rate" in results:
        launch = results["launch_rate"]
        ns_a, ns_b = 1e9 / launch["median_a"], 1e9 / launch["median_b"]
        print(f"{'launch_rate (ns per launch)':<28}{ns_a:>14.1f}{ns_b:>14.1f}"
              f"{ns_b - ns_a:>+14.1f} ns added")
    if "swapin" in results:
        print_swap(results["swapin"])
    alone = results.get("train_steps", {}).get("median_a")
    for name, row in results.get("interactive", {}).items():
        share = f" ({row['trainer_steps_per_s'] / alone:.0%} of alone)" if alone else ""
        print(f"interactive beside trainer, {name}: burst median {row['burst_median_s']:.3f} s, "
              f"max {row['burst_max_s']:.3f} s; trainer {row['trainer_steps_per_s']:.1f} steps/s"
              + share + ("" if row["trainer_outlived_user"] else "; TRAINER ENDED FIRST"))
    for name, seconds in results.get("two_jobs_s", {}).items():
        print(f"two 1500-step jobs, {name}: {seconds:.1f} s")
    if "oversub" in results:
        oversub.print_oversub(results["oversub"])
    if "notebooks" in results:
        notebooks.print_notebooks(results["notebooks"])
    if "memory_limit" in results:
        memory_limit.print_memory_limit(results["memory_limit"])
    if "beside_trainer" in results:
        print_beside(results["beside_trainer"])
    if "multi_gpu" in results:
        multi_gpu.print_multi_gpu(results["multi_gpu"])
    if "mps" in results:
        print(json.dumps(results["mps"], indent=1))
    if "classroom" in results:
        classroom.print_classroom(results["classroom"])
    if "llm_servers" in results:
        llm_servers.print_llm_servers(results["llm_servers"])


def print_swap(swap: dict) -> None:
    pinned = swap["pinned_h2d_gbps"]
    for key in ("fault_h2d_gbps", "prefetch_h2d_gbps", "prefetch_d2h_gbps", "on_grant_gbps",
                "on_grant_swap_gbps", "on_grant_gbps_overlap", "on_grant_swap_gbps_overlap",
                "pinned_h2d_gbps"):
        if swap[key] is None:  # on_grant_swap_gbps when the hot runs were not faster
            print(f"{'swap ' + key:<28}{'n/a':>14}")
            continue
        print(f"{'swap ' + key:<28}{swap[key]:>14.2f} GB/s  ({swap[key] / pinned:.0%} of pinned)")
    print(f"{'swap on grant, seconds':<28}{swap['on_grant_seconds']:>14.3f} cold, "
          f"{swap['on_grant_hot_seconds']:.3f} hot (same handoff, nothing to bring back)")


if __name__ == "__main__":
    sys.exit(main())
