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
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab import interleave, run_json  # noqa: E402
from scheduler_process import SchedulerProcess  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent / "gpu"
BUILD = Path(os.environ.get("GEMSHARE_BUILD_DIR", REPO / "build"))
PYTHON = os.environ.get("BENCH_PYTHON", sys.executable)
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
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


def main() -> int:
    library = BUILD / "libnvs.so"
    if not library.exists():
        subprocess.run(["make", "-C", str(REPO), "lib"], check=True)
    if shutil.which("nvidia-smi") is None:
        print("bench-gpu needs an NVIDIA GPU and nvidia-smi", file=sys.stderr)
        return 2
    results = {"environment": environment()}
    with tempfile.TemporaryDirectory(prefix="gs-bench-", dir="/tmp") as directory:
        scheduler = SchedulerProcess(Path(directory), tq=30, anti_thrash="on")
        try:
            plain = {}
            shared = {"LD_PRELOAD": str(library), "GEMSHARE_SOCKET": str(scheduler.socket)}
            results["launch_rate"] = interleave([str(build_launch_rate())], "launches_per_s",
                                                ROUNDS, plain, shared)
            results["train_steps"] = interleave([PYTHON, str(HERE / "train_steps.py")],
                                                "steps_per_s", ROUNDS, plain, shared)
            swap = [PYTHON, str(HERE / "swapin.py")]
            results["swapin"] = {**run_json(swap + ["managed", SWAP_GIB], shared),
                                 **run_json(swap + ["pinned", SWAP_GIB], plain)}
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
    for key in ("fault_h2d_gbps", "prefetch_h2d_gbps", "prefetch_d2h_gbps", "pinned_h2d_gbps"):
        print(f"{'swap ' + key:<28}{swap[key]:>14.2f} GB/s  ({swap[key] / pinned:.0%} of pinned)")


if __name__ == "__main__":
    sys.exit(main())
