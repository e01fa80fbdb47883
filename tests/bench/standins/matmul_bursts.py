"""Stands in for bench/gpu/matmul_bursts.py without a GPU: the same command line and output,
each burst 50 ms. BESIDE_STANDIN=hang makes it stop answering after its first burst, =fail makes
it exit 2 after it."""

import argparse
import json
import os
import sys
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--bursts", type=int, default=6)
parser.add_argument("--matmuls", type=int, default=20)
parser.add_argument("--size", type=int, default=8192)
parser.add_argument("--gap-s", type=float, default=2.0)
parser.add_argument("--period-s", type=float)
parser.add_argument("--offset-s", type=float, default=0.0)
parser.add_argument("--ready", type=Path)
parser.add_argument("--go", type=Path)
options = parser.parse_args()
print("pid", os.getpid(), file=sys.stderr, flush=True)
begin = None
if options.period_s is not None:  # the timetable: ready, then the common start from --go
    options.ready.touch()
    while not options.go.exists():
        time.sleep(0.01)
    begin = float(options.go.read_text())
for burst in range(options.bursts):
    if begin is None:
        time.sleep(options.gap_s)
        start = time.monotonic()
    else:
        start = max(begin + options.offset_s + burst * options.period_s, time.monotonic())
        time.sleep(max(0.0, start - time.monotonic()))
    time.sleep(0.05)
    print(json.dumps({"burst": burst, "start": start, "seconds": time.monotonic() - start}),
          flush=True)
    if os.environ.get("BESIDE_STANDIN") == "hang":
        time.sleep(3600)
    if os.environ.get("BESIDE_STANDIN") == "fail":
        sys.exit("out of memory")
