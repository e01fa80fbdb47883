"""Swap-in through libnvs: memory moved to the host comes back when the lock is granted after a
wait.

usage (under libnvs.so, anti-thrash on): swap_on_grant.py GIB      the measured process
                                          swap_on_grant.py --hold  a holder it starts itself

The measured process fills a tensor. One repetition: start a holder process and wait until the
holder has the GPU lock (we give it up after libnvs's idle time); submit a pass over the tensor,
which queues for the lock, and kill the holder. The scheduler grants us the lock after a wait
(GRANT_AFTER_WAIT), libnvs prefetches our memory back in bulk, and the pass runs. Timed: from
the kill to the pass's result, which includes the handoff (the holder's death, the scheduler's
grant) besides the swap-in.

Cold repetitions move the tensor to the host first (cuMemPrefetchAsync); hot ones leave it on the
device, so they time the same handoff and pass with nothing to bring back. Repetitions alternate
hot, cold, ... and each side's median is reported; bytes / (cold - hot) is the swap-in's own
bandwidth, net of the handoff.
"""

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from swapin import LOCATION_HOST, prefetch  # noqa: E402

REPEATS = 3
KILL_AFTER_S = 0.2  # by then the measured pass waits for the lock


def hold(ready_file: str) -> None:
    a = torch.ones(1024, device="cuda")
    while True:
        a.mul_(1.0)
        torch.cuda.synchronize()
        if not os.path.exists(ready_file):
            Path(ready_file).touch()


def pass_after_kill(data, expected: float) -> float:
    """One repetition: seconds from killing a holder of the lock to our pass's result."""
    ready = f"/tmp/gs-swap-holder-{os.getpid()}"
    holder = subprocess.Popen([sys.executable, __file__, "--hold", ready])
    killed_at = []

    def kill_holder():
        killed_at.append(time.perf_counter())
        os.kill(holder.pid, signal.SIGKILL)

    timer = threading.Timer(KILL_AFTER_S, kill_holder)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(ready):
            if holder.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the holder process never got the GPU lock")
            time.sleep(0.01)
        timer.start()
        total = data.sum().item()
        if not killed_at:
            raise RuntimeError("the pass ran before the holder was killed: it never waited for "
                               "the lock (not under libnvs.so with anti-thrash on?)")
        seconds = time.perf_counter() - killed_at[0]
    finally:
        # The timer first, so that it cannot signal the holder's pid after it has been reaped.
        timer.cancel()
        if timer.is_alive():
            timer.join()
        if holder.poll() is None:
            holder.kill()
        holder.wait()
        if os.path.exists(ready):
            os.unlink(ready)
    assert total == expected  # the data survived the trip to the host and back
    return seconds


def measure(gib: float) -> dict:
    count = int(gib * (1 << 30)) // 4
    data = torch.ones(count, device="cuda")
    expected = data.sum().item()  # also the warm-up of the pass
    start = time.perf_counter()
    data.sum().item()
    hot_pass_seconds = time.perf_counter() - start
    hot, cold = [], []
    for _ in range(REPEATS):
        hot.append(pass_after_kill(data, expected))
        prefetch(data, LOCATION_HOST)
        cold.append(pass_after_kill(data, expected))
    cold_s, hot_s = statistics.median(cold), statistics.median(hot)
    nbytes = count * 4
    return {"on_grant_gbps": nbytes / cold_s / 1e9, "on_grant_seconds": cold_s,
            "on_grant_hot_seconds": hot_s,
            # None if noise in the handoff hides the swap-in altogether.
            "on_grant_swap_gbps": nbytes / (cold_s - hot_s) / 1e9 if cold_s > hot_s else None,
            "on_grant_samples_cold": cold, "on_grant_samples_hot": hot,
            "hot_pass_seconds": hot_pass_seconds, "bytes": nbytes}


if __name__ == "__main__":
    if sys.argv[1] == "--hold":
        hold(sys.argv[2])
    else:
        print(json.dumps(measure(float(sys.argv[1]))))
