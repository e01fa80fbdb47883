"""Pass over a tensor of GIB again and again for WORK_SECONDS, checking its contents each time.

usage: memory_turns.py GIB WORK_SECONDS
Every pass reads and writes every page, so memory that was moved away must come back for it.
"""

import json
import statistics
import sys
import time

import torch

gib, work_seconds = float(sys.argv[1]), float(sys.argv[2])
count = int(gib * (1 << 30)) // 4
data = torch.ones(count, device="cuda")
torch.cuda.synchronize()
passes = []
start = time.monotonic()
while time.monotonic() - start < work_seconds:
    began = time.perf_counter()
    data.mul_(1.0)
    # Exact, and without a temporary the size of the tensor (a float64 sum would make one).
    low, high = (value.item() for value in torch.aminmax(data))
    passes.append(time.perf_counter() - began)
    if (low, high) != (1.0, 1.0):
        raise SystemExit(f"pass {len(passes)}: values from {low} to {high}, not all 1")
print(json.dumps({"passes": len(passes), "bytes": count * 4,
                  "median_pass_s": statistics.median(passes), "slowest_pass_s": max(passes)}))
