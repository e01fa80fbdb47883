"""Matrix products on one GPU for a fixed number of steps; prints JSON with steps per second.
The GPU is cuda:0 of whatever CUDA_VISIBLE_DEVICES leaves, or the index given second."""

import json
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
device = torch.device("cuda", int(sys.argv[2]) if len(sys.argv) > 2 else 0)
a = torch.randn(4096, 4096, device=device)
b = torch.randn(4096, 4096, device=device)
torch.cuda.synchronize(device)
started = time.monotonic()
for _ in range(steps):
    c = a @ b
    torch.cuda.synchronize(device)
seconds = time.monotonic() - started
print(json.dumps({"steps_per_s": steps / seconds, "seconds": seconds, "device": device.index,
                  "finite": bool(torch.isfinite(c).all())}))
