"""One notebook: a cell every PERIOD_S seconds, each touching all of the program's memory.

usage: notebook_cells.py GIB CELLS PERIOD_S [--ops N] [--ready FILE --go FILE] [--offset S]
                         [--finished DIR --programs N [--check-in-turn]]
Allocates GIB tensors of 1 GiB (float32), each filled with its own values, and runs one cell
untimed (a program's first cell sets things up once: CUDA's kernels, and under gemshare the
host memory its moves go through; its time is printed apart). With --ready and --go it then
creates FILE --ready and waits for FILE --go, which holds the time.time() of the common start,
so that several programs keep to the offsets they were given whatever their own start took;
without them the start is now. Cell k is due OFFSET + PERIOD_S * k seconds after the
start; it runs N in-place elementwise ops over every tensor (alternately +1 and -1, exact in
float32) and synchronizes. A cell that ends past the next one's moment makes that one due at
once: cells are never skipped. The end checks every element against what the arithmetic
predicts; with --finished, only once N programs have put a file there (their cells done), so
that no program's check touches the GPU while another still times its cells; with
--check-in-turn as well, one program at a time, each after the last has exited
(check_turns.py).

Prints one JSON line: allocation_s (from before its tensors are allocated to their fill
synchronized, CUDA's context made before: under gemshare, what it waited for room and for the
GPU), pid and allocated_at (the time.time() its allocation ended), first_cell_s (the one
before the common start), cells_s (each cell from the moment it was due to its synchronize,
so that waiting for the GPU and for memory brought back land in it), cell_median_s,
cell_p95_s, cell_max_s, seconds_from_go (from the common start to the last cell's end),
mismatched_elements, intact. Exits 1 if not intact.
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from check_turns import wait_turn
from patterned import filled, mismatches, touch_all

FINISH_TIMEOUT_S = 120  # for the other programs' cells to end


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gib", type=int)
    parser.add_argument("cells", type=int)
    parser.add_argument("period_s", type=float)
    parser.add_argument("--ops", type=int, default=20, help="elementwise ops per cell")
    parser.add_argument("--ready", type=Path, help="created once the memory is filled")
    parser.add_argument("--go", type=Path, help="waited for; holds the start's time.time()")
    parser.add_argument("--offset", type=float, default=0.0,
                        help="seconds from the start to the first cell")
    parser.add_argument("--finished", type=Path, help="where each program says its cells ended")
    parser.add_argument("--programs", type=int, default=1, help="programs --finished waits for")
    parser.add_argument("--check-in-turn", action="store_true",
                        help="with --finished: check one program at a time")
    options = parser.parse_args()
    if options.gib < 1 or options.cells < 1 or options.period_s <= 0 or options.ops < 1:
        parser.error("GIB, CELLS and --ops must be at least 1, PERIOD_S more than 0")
    torch.empty(1, device="cuda")  # CUDA's context, before the allocation is timed; no kernel
    allocation = time.perf_counter()
    tensors = filled(options.gib)
    torch.cuda.synchronize()
    allocation = time.perf_counter() - allocation
    allocated_at = time.time()
    first = time.perf_counter()
    touch_all(tensors, options.ops)
    first = time.perf_counter() - first
    go_at = time.time()
    if options.ready and options.go:
        options.ready.touch()
        while not options.go.exists():
            time.sleep(0.01)
        go_at = float(options.go.read_text())
    # The common start on this process's monotonic clock.
    start = time.perf_counter() + max(0.0, go_at - time.time())
    cells = []
    for index in range(options.cells):
        due = start + options.offset + index * options.period_s
        time.sleep(max(0.0, due - time.perf_counter()))
        due = max(due, time.perf_counter())  # the last cell ran past this one's moment
        touch_all(tensors, options.ops)
        cells.append(time.perf_counter() - due)
    seconds = time.perf_counter() - start
    if options.finished:
        (options.finished / str(os.getpid())).touch()
        deadline = time.monotonic() + FINISH_TIMEOUT_S
        while len(list(options.finished.iterdir())) < options.programs and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        if options.check_in_turn:
            wait_turn(options.finished.with_name(options.finished.name + ".check-lock"),
                      FINISH_TIMEOUT_S)
    # An odd number of ops leaves every value one higher after each cell (the first included).
    wrong = mismatches(tensors, (options.cells + 1) * (options.ops % 2))
    print(json.dumps({"gib": options.gib, "cells": options.cells, "period_s": options.period_s,
                      "ops": options.ops, "allocation_s": allocation,
                      "pid": os.getpid(), "allocated_at": allocated_at,
                      "first_cell_s": first, "cells_s": cells,
                      "cell_median_s": statistics.median(cells),
                      "cell_p95_s": percentile(cells, 0.95), "cell_max_s": max(cells),
                      "seconds_from_go": seconds, "mismatched_elements": wrong,
                      "intact": wrong == 0}))
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
