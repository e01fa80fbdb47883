"""A small PyTorch training loop; prints JSON with its losses and whether its tensors are managed."""

import json
import sys
import time

import torch

from managed_pointer import is_managed

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(),
                            torch.nn.Linear(2048, 512)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
inputs = torch.randn(256, 512, device="cuda")
targets = torch.tanh(inputs @ torch.randn(512, 512, device="cuda") / 23)
losses = []
started = time.monotonic()
for _ in range(steps):
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
print(json.dumps({"first_loss": losses[0], "last_loss": losses[-1],
                  "seconds": time.monotonic() - started,
                  "weight_managed": is_managed(model[0].weight.data_ptr()),
                  "input_managed": is_managed(inputs.data_ptr())}))
