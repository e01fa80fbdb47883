"""Stands in for bench/gpu/notebook_cells.py without a GPU: the same command line and JSON line,
each cell 10 ms of sleep on the same timetable (--ready, --go, --offset, --finished)."""

import argparse
import json
import os
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("gib", type=int)
parser.add_argument("cells", type=int)
parser.add_argument("period_s", type=float)
parser.add_argument("--ops", type=int, default=20)
parser.add_argument("--ready", type=Path)
parser.add_argument("--go", type=Path)
parser.add_argument("--offset", type=float, default=0.0)
parser.add_argument("--finished", type=Path)
parser.add_argument("--programs", type=int, default=1)
parser.add_argument("--check-in-turn", action="store_true")  # it checks nothing
options = parser.parse_args()
allocation, first = 0.02, 0.01
time.sleep(allocation)
allocated_at = time.time()
time.sleep(first)
options.ready.touch()
while not options.go.exists():
    time.sleep(0.01)
start = time.perf_counter() + max(0.0, float(options.go.read_text()) - time.time())
cells = []
for index in range(options.cells):
    due = start + options.offset + index * options.period_s
    time.sleep(max(0.0, due - time.perf_counter()))
    due = max(due, time.perf_counter())
    time.sleep(0.01)
    cells.append(time.perf_counter() - due)
seconds = time.perf_counter() - start
if options.finished:
    (options.finished / str(os.getpid())).touch()
print(json.dumps({"gib": options.gib, "cells": options.cells, "period_s": options.period_s,
                  "ops": options.ops, "allocation_s": allocation, "pid": os.getpid(),
                  "allocated_at": allocated_at, "first_cell_s": first,
                  "cells_s": cells, "cell_median_s": sorted(cells)[len(cells) // 2],
                  "cell_p95_s": max(cells), "cell_max_s": max(cells), "seconds_from_go": seconds,
                  "mismatched_elements": 0, "intact": True}))
