"""Stands in for bench/gpu/matmul_bursts.py without a GPU: the same command line and output,
each burst 50 ms. BESIDE_STANDIN=hang makes it stop answering after its first burst, =fail makes
it exit 2 after it."""

import argparse
import json
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--bursts", type=int, default=6)
parser.add_argument("--matmuls", type=int, default=20)
parser.add_argument("--size", type=int, default=8192)
parser.add_argument("--gap-s", type=float, default=2.0)
options = parser.parse_args()
print("pid", os.getpid(), file=sys.stderr, flush=True)
for burst in range(options.bursts):
    time.sleep(options.gap_s)
    start = time.monotonic()
    time.sleep(0.05)
    print(json.dumps({"burst": burst, "start": start, "seconds": time.monotonic() - start}),
          flush=True)
    if os.environ.get("BESIDE_STANDIN") == "hang":
        time.sleep(3600)
    if os.environ.get("BESIDE_STANDIN") == "fail":
        sys.exit("out of memory")
