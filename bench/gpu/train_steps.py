"""Training steps per second of a small transformer-style MLP block (fits in well under 8 GiB).

usage: train_steps.py [STEPS] [--seconds S]   (a fixed number of steps, or as many as fit in S)
"""

import argparse
import json
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("steps", type=int, nargs="?", default=200)
parser.add_argument("--seconds", type=float, default=None)
options = parser.parse_args()

torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = True
width = 2048
model = torch.nn.Sequential(torch.nn.LayerNorm(width), torch.nn.Linear(width, 4 * width),
                            torch.nn.GELU(), torch.nn.Linear(4 * width, width)).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
batch = torch.randn(32, 256, width, device="cuda")


def step():
    optimizer.zero_grad(set_to_none=True)
    loss = model(batch).float().pow(2).mean()
    loss.backward()
    optimizer.step()


for _ in range(20):  # warm-up: allocator, cuBLAS handles, kernel selection
    step()
torch.cuda.synchronize()
start = time.perf_counter()
steps = 0
while (steps < options.steps if options.seconds is None
       else time.perf_counter() - start < options.seconds):
    for _ in range(10):
        step()
    torch.cuda.synchronize()
    steps += 10
elapsed = time.perf_counter() - start
print(json.dumps({"steps_per_s": steps / elapsed, "steps": steps, "seconds": elapsed}))
