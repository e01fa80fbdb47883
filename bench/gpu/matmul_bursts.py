"""An interactive user: bursts of square matmuls, each waited for, between CPU-only pauses.

usage: matmul_bursts.py [--bursts N] [--matmuls M] [--size S] [--gap-s G]
                        [--period-s P [--offset-s O] --ready PATH --go PATH]
One untimed matmul first (cuBLAS set-up, memory), then N times: sleep G seconds, run M matmuls
of S x S (float32) and synchronize. With --period-s the bursts keep to a timetable instead, as
a class's notebooks do: it creates --ready, waits for --go, which holds the common start on
time.monotonic's clock, and burst k is due O + k * P seconds after it (one that ends past the
next one's moment makes that one due at once; none is skipped). The defaults (6 bursts of 20
matmuls of 8192^2, 2 s apart) make a burst about 0.43 s on an H100 alone. Prints one JSON
line per burst as it ends, so that a run stopped early still says what it did: `burst` (from
0), `start` (when the burst was wanted, on time.monotonic's clock, which every process of the
machine shares) and `seconds` (from then until its result was back on the host, waits for the
GPU included). About 3 x S^2 x 4 bytes of
GPU memory (768 MiB at 8192).
"""

import argparse
import json
import time
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bursts", type=int, default=6)
    parser.add_argument("--matmuls", type=int, default=20)
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--gap-s", type=float, default=2.0)
    parser.add_argument("--period-s", type=float, help="a burst every P s from the --go start")
    parser.add_argument("--offset-s", type=float, default=0.0, help="the first burst's moment")
    parser.add_argument("--ready", type=Path, help="created once set up (with --period-s)")
    parser.add_argument("--go", type=Path, help="waited for; holds the start (with --period-s)")
    options = parser.parse_args()
    if options.bursts < 1 or options.matmuls < 1 or options.size < 1 or options.gap_s < 0:
        parser.error("--bursts, --matmuls and --size must be at least 1, --gap-s at least 0")
    if options.period_s is not None and (options.period_s <= 0 or options.offset_s < 0
                                         or not options.ready or not options.go):
        parser.error("--period-s must be more than 0, --offset-s at least 0, with --ready and "
                     "--go")
    # Plain float32, whatever this PyTorch's default: the burst time the bench documents.
    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = (torch.randn(options.size, options.size, device="cuda") for _ in range(2))
    c = torch.matmul(a, b)
    torch.cuda.synchronize()
    begin = timetable_start(options) if options.period_s is not None else None
    for burst in range(options.bursts):
        if begin is None:
            time.sleep(options.gap_s)
            start = time.monotonic()
        else:
            start = begin + options.offset_s + burst * options.period_s
            if start > time.monotonic():
                time.sleep(start - time.monotonic())
            else:  # the last burst ran past this one's moment: due now
                start = time.monotonic()
        for _ in range(options.matmuls):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        print(json.dumps({"burst": burst, "start": round(start, 6),
                          "seconds": round(time.monotonic() - start, 6)}), flush=True)


def timetable_start(options) -> float:
    """Says it is ready, then waits for the common start (time.monotonic's, in --go)."""
    options.ready.touch()
    while not options.go.exists():
        time.sleep(0.01)
    return float(options.go.read_text())


if __name__ == "__main__":
    main()
