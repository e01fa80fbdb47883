"""One rank of a data-parallel job, started by torchrun: a small MLP trained with
DistributedDataParallel over NCCL (every step's gradients all-reduced across the ranks), on the
GPU torchrun's LOCAL_RANK names. Rank 0 prints JSON: steps per second, the loss, and whether the
ranks' weights agree after training (they must, or the all-reduce lost something)."""

import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda(),
    device_ids=[local_rank])
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
generator = torch.Generator(device="cuda").manual_seed(rank)  # each rank its own data
inputs = torch.randn(512, 1024, device="cuda", generator=generator)
targets = torch.tanh(inputs.roll(1, dims=1))
losses = []
torch.cuda.synchronize()
started = time.monotonic()
for _ in range(steps):
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
seconds = time.monotonic() - started
weights = model.module[0].weight.detach().flatten()[:4096].clone()
gathered = [torch.empty_like(weights) for _ in range(dist.get_world_size())]
dist.all_gather(gathered, weights)
if rank == 0:
    print(json.dumps({"steps_per_s": steps / seconds, "seconds": seconds,
                      "first_loss": losses[0], "last_loss": losses[-1],
                      "ranks_agree": all(torch.equal(gathered[0], g) for g in gathered)}))
dist.destroy_process_group()
