"""Swap-in through libnvs: memory moved to the host comes back when the lock is granted after a wait.

usage (under libnvs.so, anti-thrash on): swap_on_grant.py GIB      the measured process
                                          swap_on_grant.py --hold  a holder it starts itself

The measured process fills a tensor, moves it to the host (cuMemPrefetchAsync), starts a holder
process and waits until the holder has the GPU lock. It then submits a pass over its tensor,
which queues for the lock, and kills the holder: the scheduler grants the lock after a wait
(GRANT_AFTER_WAIT), libnvs prefetches the tensor back in bulk, and the pass runs. Reported:
bytes over the time from the kill to the pass's result, which includes the handoff.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from swapin import LOCATION_HOST, prefetch  # noqa: E402


def hold(ready_file: str) -> None:
    a = torch.ones(1024, device="cuda")
    while True:
        a.mul_(1.0)
        torch.cuda.synchronize()
        if not os.path.exists(ready_file):
            Path(ready_file).touch()


def measure(gib: float) -> dict:
    count = int(gib * (1 << 30)) // 4
    data = torch.ones(count, device="cuda")
    start = time.perf_counter()
    hot = data.sum().item()
    hot_seconds = time.perf_counter() - start
    prefetch(data, LOCATION_HOST)
    ready = f"/tmp/gs-swap-holder-{os.getpid()}"
    holder = subprocess.Popen([sys.executable, __file__, "--hold", ready])
    deadline = time.monotonic() + 120
    while not os.path.exists(ready):
        if holder.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the holder process never got the GPU lock")
        time.sleep(0.01)
    killed_at = []

    def kill_holder():
        killed_at.append(time.perf_counter())
        os.kill(holder.pid, signal.SIGKILL)

    threading.Timer(0.2, kill_holder).start()  # by then our pass waits for the lock
    cold = data.sum().item()
    seconds = time.perf_counter() - killed_at[0]
    holder.wait()
    os.unlink(ready)
    assert cold == hot
    return {"on_grant_gbps": count * 4 / seconds / 1e9, "on_grant_seconds": seconds,
            "hot_pass_seconds": hot_seconds, "bytes": count * 4}


if __name__ == "__main__":
    if sys.argv[1] == "--hold":
        hold(sys.argv[2])
    else:
        print(json.dumps(measure(float(sys.argv[1]))))
