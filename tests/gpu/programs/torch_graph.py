"""Capture a CUDA graph with PyTorch, replay it, and compare with eager results."""

import json

import torch

from managed_pointer import is_managed

static_in = torch.randn(1024, 1024, device="cuda")
weight = torch.randn(1024, 1024, device="cuda")

side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):  # warm-up on a side stream, as PyTorch asks before capture
    for _ in range(3):
        static_out = torch.relu(static_in @ weight).sum(dim=1)
torch.cuda.current_stream().wait_stream(side)

graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    static_out = torch.relu(static_in @ weight).sum(dim=1)

worst = 0.0
for _ in range(10):
    static_in.copy_(torch.randn(1024, 1024, device="cuda"))
    graph.replay()
    expected = torch.relu(static_in @ weight).sum(dim=1)
    worst = max(worst, (static_out - expected).abs().max().item())
torch.cuda.synchronize()
print(json.dumps({"max_abs_error": worst, "input_managed": is_managed(static_in.data_ptr())}))
