"""PyTorch with expandable segments (its allocator maps memory with cuMemCreate/cuMemMap), which
the library leaves as device memory but must count: report what was allocated, then hold it a
moment so that the scheduler's status can be read.

usage: torch_expandable.py HOLD_SECONDS
"""

import json
import sys
import time

import torch

from managed_pointer import is_managed

hold_seconds = float(sys.argv[1])
ELEMENTS = 128 << 20  # 1 GiB of int64, whose sums are exact
blocks = [torch.full((ELEMENTS,), i, device="cuda", dtype=torch.int64) for i in range(4)]
total = sum(int(block.sum()) for block in blocks)
torch.cuda.synchronize()
print(json.dumps({"sum": total, "expected": sum(i * ELEMENTS for i in range(4)),
                  "managed": is_managed(blocks[0].data_ptr()),
                  "reserved_bytes": torch.cuda.memory_reserved()}), flush=True)
time.sleep(hold_seconds)
