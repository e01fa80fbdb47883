"""Memory whose every element can be checked: the workloads whose passes touch all of a
program's memory (oversub_pass.py, notebook_cells.py) build, run and check it alike."""

import torch

ELEMENTS = (1 << 30) // 4  # float32 elements in 1 GiB
# Each tensor holds its own PATTERN consecutive values, repeated: a page landing in the wrong
# place (another tensor, another offset) or coming back zeroed shows up as a wrong value.
PATTERN = 256


def pattern(index: int, shift: int):
    return torch.arange(PATTERN, dtype=torch.float32, device="cuda") + (index * PATTERN + shift)


def filled(gib: int) -> list:
    """GIB tensors of 1 GiB on the GPU, each with its own pattern."""
    return [pattern(index, 0).repeat(ELEMENTS // PATTERN) for index in range(gib)]


def touch_all(tensors, ops: int) -> None:
    """OPS in-place elementwise ops over every tensor (alternately +1 and -1, exact in float32
    at these magnitudes), then a synchronization."""
    for op in range(ops):
        for tensor in tensors:
            tensor.add_(1.0 if op % 2 == 0 else -1.0)
    torch.cuda.synchronize()


def mismatches(tensors, shift: int) -> int:
    """Elements that differ from their pattern plus `shift` (what the ops added)."""
    wrong = torch.zeros((), dtype=torch.int64, device="cuda")
    for index, tensor in enumerate(tensors):
        wrong += (tensor.view(-1, PATTERN) != pattern(index, shift)).sum()
    return int(wrong.item())
