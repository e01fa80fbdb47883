"""Stands in for bench/gpu/matmul_trainer.py without a GPU: the same command line and output,
a "step" every 5 ms. BESIDE_STANDIN=crash makes it fail before it is ready."""

import argparse
import os
import sys
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--size", type=int, default=8192)
parser.add_argument("--ready", type=Path)
parser.add_argument("--max-seconds", type=float, default=300.0)
options = parser.parse_args()
print("pid", os.getpid(), "GEMSHARE_SOCKET", os.environ.get("GEMSHARE_SOCKET"),
      "GEMSHARE_LABEL", os.environ.get("GEMSHARE_LABEL"), file=sys.stderr, flush=True)
if os.environ.get("BESIDE_STANDIN") == "crash":
    sys.exit("the trainer fell over")
options.ready.touch()
end = time.monotonic() + options.max_seconds
while time.monotonic() < end:
    time.sleep(0.005)
    print(f"{time.monotonic():.6f}", flush=True)
