"""One program of an oversubscribed pair: every pass touches all of its memory.

usage: oversub_pass.py GIB PASSES GAP_S [--ops N]
Allocates GIB tensors of 1 GiB (float32) on the GPU, each filled with its own values. Each pass
sleeps GAP_S seconds (CPU-only time: 0 keeps the GPU busy, 0.5 half busy), then runs N in-place
elementwise ops over every tensor and synchronizes. The ops alternate +1 and -1, exact in
float32 at these magnitudes, so the end can check every element against what the arithmetic
predicts. N is fixed (not calibrated at run time) so that every side of a comparison does the
same work; the default makes a 16 GiB pass about 0.5 s on an H100 alone (~11 ms per op).

Prints one JSON line: seconds (wall time from the script's start, CUDA's start-up and the
allocation included), pass_median_s and pass_max_s (a pass's GPU part: from its first op to its
synchronize, so waits for the GPU and memory brought back land there), intact. Exits 1 if not
intact.
"""

import time

START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

from patterned import filled, mismatches, touch_all  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gib", type=int)
    parser.add_argument("passes", type=int)
    parser.add_argument("gap_s", type=float)
    parser.add_argument("--ops", type=int, default=40, help="elementwise ops per pass")
    options = parser.parse_args()
    if options.gib < 1 or options.passes < 1 or options.gap_s < 0 or options.ops < 1:
        parser.error("GIB, PASSES and --ops must be at least 1, GAP_S at least 0")
    tensors = filled(options.gib)
    torch.cuda.synchronize()
    passes = []
    for _ in range(options.passes):
        time.sleep(options.gap_s)
        start = time.perf_counter()
        touch_all(tensors, options.ops)
        passes.append(time.perf_counter() - start)
    # An odd number of ops leaves every value one higher after each pass.
    wrong = mismatches(tensors, options.passes * (options.ops % 2))
    print(json.dumps({"gib": options.gib, "passes": options.passes, "gap_s": options.gap_s,
                      "ops": options.ops, "seconds": time.perf_counter() - START,
                      "pass_median_s": statistics.median(passes), "pass_max_s": max(passes),
                      "mismatched_elements": wrong, "intact": wrong == 0}))
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
