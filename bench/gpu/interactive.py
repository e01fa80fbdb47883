"""An interactive user: short bursts of GPU work separated by idle gaps; reports burst latency.

usage: interactive.py BURSTS GAP_SECONDS
Latency is from the moment a burst is wanted to the moment its results are back on the host.
One untimed burst first, so that cuBLAS's one-time set-up is not counted as a burst's latency.
"""

import json
import statistics
import sys
import time

import torch


def burst(a):
    b = a
    for _ in range(10):
        b = torch.tanh(b @ a / 2048)
    b.sum().item()


bursts, gap = int(sys.argv[1]), float(sys.argv[2])
a = torch.randn(2048, 2048, device="cuda")
burst(a)
latencies = []
for _ in range(bursts):
    time.sleep(gap)
    start = time.perf_counter()
    burst(a)
    latencies.append(time.perf_counter() - start)
print(json.dumps({"burst_median_s": statistics.median(latencies), "burst_max_s": max(latencies),
                  "bursts": bursts}))
