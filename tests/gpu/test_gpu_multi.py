"""libnvs.so on several real GPUs: a lock per device, and gangs for data-parallel jobs. Skipped
where fewer than two GPUs are visible (speed is bench-gpu's part multi_gpu, not asserted here)."""

import shutil
import subprocess
import time

import pytest

from conftest import REPO
from test_gpu_libnvs import needs_torch, status

WORKLOADS = REPO / "bench" / "gpu"


def visible_gpus() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(line.startswith("GPU ") for line in listed.stdout.splitlines())


pytestmark = [needs_torch,
              pytest.mark.skipif(visible_gpus() < 2, reason="needs two GPUs")]


def start(gpu_program, launcher, *args, socket):
    return gpu_program(str(WORKLOADS / args[0]), *args[1:], socket=socket, launcher=launcher)


def test_programs_on_two_gpus_hold_both_locks_at_once(scheduler_factory, gpu_program):
    scheduler = scheduler_factory(tq=30)
    programs = [start(gpu_program, (), "matmul_steps.py", 400, gpu, socket=scheduler.socket)
                for gpu in (0, 1)]
    both_held, waits = False, {}
    while any(p.poll() is None for p in programs):
        now = status(scheduler.socket)
        devices = {d["index"]: d for d in now["devices"]}
        both_held |= all(devices.get(gpu, {}).get("holders") for gpu in (0, 1))
        waits.update((c["pid"], c["waits"]) for c in now["clients"])
        time.sleep(0.05)
    results = [program.result() for program in programs]
    assert both_held, "the two programs never held their GPUs at the same time"
    assert waits and not any(waits.values()), waits  # neither ever waited for the other
    assert all(result["finite"] for result in results)


def test_two_data_parallel_jobs_take_gang_turns_on_two_gpus(scheduler_factory, gpu_program):
    scheduler = scheduler_factory(tq=5)
    torchrun = (*("-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"),)
    jobs = [start(gpu_program, torchrun, "ddp_steps.py", 400, socket=scheduler.socket)
            for _ in range(2)]
    results = [job.result() for job in jobs]
    assert all(result["ranks_agree"] for result in results)
    assert all(result["last_loss"] < result["first_loss"] for result in results)
    log = scheduler.log()
    assert log.count("grant gang") >= 2, log[-3000:]
    # Only the end of a job takes a lock away: never a drain that a collective blocked.
    assert all("its gang lost" in line for line in log.splitlines() if "revoke client" in line)
