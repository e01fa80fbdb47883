"""Stands in for bench/gpu/llm_server.py without a GPU: the same command line and JSON line,
each request 20 ms of sleep at the times its schedule names, its tokens made from its seed and
index (the same in every run, as the real server's must be)."""

import argparse
import json
import time
from pathlib import Path

parser = argparse.ArgumentParser()
for name, kind in (("--params-b", float), ("--card-mib", int), ("--share", float),
                   ("--seed", int), ("--prompt", int), ("--new-tokens", int)):
    parser.add_argument(name, type=kind)
parser.add_argument("--schedule", type=Path)
parser.add_argument("--closed", action="store_true")
parser.add_argument("--ready", type=Path)
parser.add_argument("--go", type=Path)
options = parser.parse_args()
arrivals = json.loads(options.schedule.read_text())
if options.ready:
    options.ready.touch()
while options.go and not options.go.exists():
    time.sleep(0.01)
start = time.perf_counter()
if options.go:
    start += max(0.0, float(options.go.read_text()) - time.time())
served = []
for index, arrival in enumerate(arrivals):
    due = time.perf_counter() if options.closed else start + arrival
    time.sleep(max(0.0, due - time.perf_counter()))
    began, wall = time.perf_counter(), time.time()
    time.sleep(0.02)
    served.append({"index": index, "ttft_s": time.perf_counter() - due, "tpot_s": 0.001,
                   "tokens": [(options.seed * 31 + index * 7 + k) % 1000
                              for k in range(options.new_tokens)],
                   "first_token_wall": wall + 0.02, "arrival_s": due - start,
                   "end_s": time.perf_counter() - start})
print(json.dumps({"startup_s": 0.0, "weights_bytes": 1 << 30, "pool_bytes": 1 << 30,
                  "layers": 1, "requests": served}))
