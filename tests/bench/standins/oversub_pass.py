"""Stands in for bench/gpu/oversub_pass.py without a GPU: the same command line and JSON line,
each pass 10 ms of sleep after its gap."""

import argparse
import json
import time

START = time.perf_counter()
parser = argparse.ArgumentParser()
parser.add_argument("gib", type=int)
parser.add_argument("passes", type=int)
parser.add_argument("gap_s", type=float)
parser.add_argument("--ops", type=int, default=40)
options = parser.parse_args()
passes = []
for _ in range(options.passes):
    time.sleep(min(options.gap_s, 0.02))  # the gap's length is no part of what is checked
    begin = time.perf_counter()
    time.sleep(0.01)
    passes.append(time.perf_counter() - begin)
print(json.dumps({"gib": options.gib, "passes": options.passes, "gap_s": options.gap_s,
                  "ops": options.ops, "seconds": time.perf_counter() - START,
                  "pass_median_s": sorted(passes)[len(passes) // 2], "pass_max_s": max(passes),
                  "mismatched_elements": 0, "intact": True}))
