"""Keep the GPU busy with a Triton kernel, which Triton launches through libcuda found by dlsym.

Between its set-up and its final check the loop submits nothing but Triton launches, so any
lock it asks for again after a turn was asked for by those launches.

usage: triton_work.py WORK_SECONDS
"""

import json
import sys
import time

import torch
import triton
import triton.language as tl

from managed_pointer import is_managed

BLOCK = 1024
LAUNCHES_PER_CHUNK = 100


@triton.jit
def halve_and_add_one(values, count, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < count
    tl.store(values + offsets, tl.load(values + offsets, mask=inside) * 0.5 + 1.0, mask=inside)


def launch(values):
    halve_and_add_one[(triton.cdiv(values.numel(), BLOCK),)](values, values.numel(), BLOCK=BLOCK)


work_seconds = float(sys.argv[1])
values = torch.arange(1 << 24, device="cuda", dtype=torch.float32)
expected = values * 0.5 + 1.0
launch(values)  # compiles the kernel
first_exact = bool(torch.equal(values, expected))
torch.cuda.synchronize()
ready = time.time()
chunks = 0
while time.time() - ready < work_seconds:
    for _ in range(LAUNCHES_PER_CHUNK):
        launch(values)
    torch.cuda.synchronize()
    chunks += 1
work_done = time.time()
# x -> x/2 + 1 converges to 2; after a hundred launches every value is 2 to float precision.
converged = bool(torch.allclose(values, torch.full_like(values, 2.0)))
print(json.dumps({"chunks": chunks, "ready": ready, "work_done": work_done,
                  "first_launch_exact": first_exact, "converged": converged,
                  "managed": is_managed(values.data_ptr()), "triton": triton.__version__}))
