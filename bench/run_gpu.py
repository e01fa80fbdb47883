"""make bench-gpu: libnvs.so against no sharing layer on a real GPU; prints a table, writes JSON.

Environment: BENCH_JSON=path (write the results there), BENCH_PYTHON (the Python with PyTorch
for the workloads; default: this one), BENCH_ROUNDS (A/B rounds, default 5), SWAP_GIB (default 4;
keep it well under 8 and under the card's free memory).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab import interleave, run_json  # noqa: E402
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
    """A trainer for 30 s; 3 s in, an interactive process makes 8 bursts 2 s apart."""
    trainer = start_json([PYTHON, str(HERE / "train_steps.py"), "--seconds", "30"], env)
    time.sleep(3)
    user = finish_json(start_json([PYTHON, str(HERE / "interactive.py"), "8", "2"], env))
    return {**user, "trainer_steps_per_s": finish_json(trainer)["steps_per_s"]}


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


def sharing(library: Path, directory: Path, tq: int) -> tuple[SchedulerProcess, dict]:
    directory.mkdir()
    scheduler = SchedulerProcess(directory, tq=tq, anti_thrash="on")
    return scheduler, {"LD_PRELOAD": str(library), "GEMSHARE_SOCKET": str(scheduler.socket)}


def main() -> int:
    library = BUILD / "libnvs.so"
    if not library.exists():
        subprocess.run(["make", "-C", str(REPO), "lib"], check=True)
    if shutil.which("nvidia-smi") is None:
        print("bench-gpu needs an NVIDIA GPU and nvidia-smi", file=sys.stderr)
        return 2
    results = {"environment": environment()}
    plain: dict = {}
    with tempfile.TemporaryDirectory(prefix="gs-bench-", dir="/tmp") as directory:
        scheduler, shared = sharing(library, Path(directory) / "tq30", 30)
        try:
            results["launch_rate"] = interleave([str(build_launch_rate())], "launches_per_s",
                                                2 * ROUNDS + 1, plain, shared)
            results["train_steps"] = interleave([PYTHON, str(HERE / "train_steps.py")],
                                                "steps_per_s", ROUNDS, plain, shared)
            swap = [PYTHON, str(HERE / "swapin.py")]
            results["swapin"] = {**run_json(swap + ["managed", SWAP_GIB], shared),
                                 **run_json(swap + ["pinned", SWAP_GIB], plain),
                                 **run_json([PYTHON, str(HERE / "swap_on_grant.py"), SWAP_GIB],
                                            shared)}
        finally:
            scheduler.stop()
        scheduler, shared = sharing(library, Path(directory) / "tq5", 5)
        try:
            results["interactive"] = {"no_layer": interactive_beside_trainer(plain),
                                      "libnvs_tq5": interactive_beside_trainer(shared)}
            results["two_jobs_s"] = {"one_after_another": two_jobs(plain, together=False),
                                     "together_libnvs_tq5": two_jobs(shared, together=True),
                                     "together_no_layer": two_jobs(plain, together=True)}
        finally:
            scheduler.stop()
    if os.environ.get("BENCH_JSON"):
        Path(os.environ["BENCH_JSON"]).write_text(json.dumps(results, indent=2))
    print_table(results)
    return 0


def print_table(results: dict) -> None:
    env = results["environment"]
    print(f"\n{env['gpu']} | torch {env['torch']} (CUDA {env['torch_cuda']}) | {env['date']}")
    print(f"{'benchmark':<28}{'plain':>14}{'libnvs':>14}{'libnvs/plain':>14}")
    for name in ("launch_rate", "train_steps"):
        row = results[name]
        print(f"{name + ' (' + row['metric'] + ')':<28}{row['median_a']:>14.1f}"
              f"{row['median_b']:>14.1f}{row['ratio_b_over_a']:>14.4f}")
    swap = results["swapin"]
    pinned = swap["pinned_h2d_gbps"]
    for key in ("fault_h2d_gbps", "prefetch_h2d_gbps", "prefetch_d2h_gbps", "on_grant_gbps",
                "pinned_h2d_gbps"):
        print(f"{'swap ' + key:<28}{swap[key]:>14.2f} GB/s  ({swap[key] / pinned:.0%} of pinned)")
    alone = results["train_steps"]["median_a"]
    for name, row in results["interactive"].items():
        print(f"interactive beside trainer, {name}: burst median {row['burst_median_s']:.3f} s, "
              f"max {row['burst_max_s']:.3f} s; trainer {row['trainer_steps_per_s']:.1f} steps/s "
              f"({row['trainer_steps_per_s'] / alone:.0%} of alone)")
    for name, seconds in results["two_jobs_s"].items():
        print(f"two 1500-step jobs, {name}: {seconds:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
