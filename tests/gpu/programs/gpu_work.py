"""Busy the GPU for a while, optionally idle, and report when things happened (time.time()).

usage: gpu_work.py WORK_SECONDS [IDLE_SECONDS_AFTER]
"""

import json
import sys
import time

import torch

work_seconds = float(sys.argv[1])
idle_after = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
a = torch.randn(2048, 2048, device="cuda")
torch.cuda.synchronize()
ready = time.time()
chunks = 0
while time.time() - ready < work_seconds:
    for _ in range(20):
        a = torch.tanh(a @ a / 2048)
    torch.cuda.synchronize()
    chunks += 1
work_done = time.time()
time.sleep(idle_after)
print(json.dumps({"ready": ready, "work_done": work_done, "exit": time.time(),
                  "chunks": chunks}))
