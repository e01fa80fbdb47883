"""Training steps per second of a small transformer-style MLP block (fits in well under 8 GiB)."""

import json
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
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
for _ in range(steps):
    step()
torch.cuda.synchronize()
print(json.dumps({"steps_per_s": steps / (time.perf_counter() - start)}))
