"""An interactive user: bursts of square matmuls, each waited for, between CPU-only pauses.

usage: matmul_bursts.py [--bursts N] [--matmuls M] [--size S] [--gap-s G]
One untimed matmul first (cuBLAS set-up, memory), then N times: sleep G seconds, run M matmuls
of S x S (float32) and synchronize. The defaults (6 bursts of 20 matmuls of 8192^2, 2 s apart)
make a burst about 0.43 s on an H100 alone. Prints one JSON line per burst as it ends, so that a
run stopped early still says what it did: `burst` (from 0), `start` (when the burst was wanted,
on time.monotonic's clock, which every process of the machine shares) and `seconds` (from then
until its result was back on the host, waits for the GPU included). About 3 x S^2 x 4 bytes of
GPU memory (768 MiB at 8192).
"""

import argparse
import json
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bursts", type=int, default=6)
    parser.add_argument("--matmuls", type=int, default=20)
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--gap-s", type=float, default=2.0)
    options = parser.parse_args()
    if options.bursts < 1 or options.matmuls < 1 or options.size < 1 or options.gap_s < 0:
        parser.error("--bursts, --matmuls and --size must be at least 1, --gap-s at least 0")
    # Plain float32, whatever this PyTorch's default: the burst time the bench documents.
    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = (torch.randn(options.size, options.size, device="cuda") for _ in range(2))
    c = torch.matmul(a, b)
    torch.cuda.synchronize()
    for burst in range(options.bursts):
        time.sleep(options.gap_s)
        start = time.monotonic()
        for _ in range(options.matmuls):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        print(json.dumps({"burst": burst, "start": round(start, 6),
                          "seconds": round(time.monotonic() - start, 6)}), flush=True)


if __name__ == "__main__":
    main()
