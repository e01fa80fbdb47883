"""A trainer that never pauses: back-to-back steps, each one square matmul and a synchronize.

usage: matmul_trainer.py [--size N] [--ready PATH] [--max-seconds S]
After a few untimed warm-up steps it creates PATH, so that whoever started it knows it runs at
full speed, then prints one line per step: the time its result was back on the host, on
time.monotonic's clock (CLOCK_MONOTONIC, one clock for every process of the machine). The bench
counts the steps inside whatever window it measures, so the trainer needs no end of its own; it
stops after S seconds (default 300) only in case the bench that started it could not stop it.
About 3 x N^2 x 4 bytes of GPU memory (768 MiB at 8192).
"""

import argparse
import time
from pathlib import Path

import torch

WARM_UP_STEPS = 5  # cuBLAS set-up and kernel selection, before anyone is told it runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--ready", type=Path)
    parser.add_argument("--max-seconds", type=float, default=300.0)
    options = parser.parse_args()
    # Plain float32, whatever this PyTorch's default: the step time the bench documents.
    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = (torch.randn(options.size, options.size, device="cuda") for _ in range(2))
    c = torch.empty_like(a)
    for _ in range(WARM_UP_STEPS):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    if options.ready:
        options.ready.touch()
    end = time.monotonic() + options.max_seconds
    while time.monotonic() < end:
        torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        # Flushed at once: the bench ends the trainer with a signal and reads what is there.
        print(f"{time.monotonic():.6f}", flush=True)


if __name__ == "__main__":
    main()
