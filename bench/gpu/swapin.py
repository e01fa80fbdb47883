"""Swap-in bandwidth of managed memory, beside pinned memcpy, on one GPU.

usage: swapin.py managed|pinned GIB
managed (run under libnvs.so, so PyTorch's memory is managed): fill a tensor on the GPU, move it
to the host with cuMemPrefetchAsync, then time its return (a) by page faults, as a kernel touches
it, and (b) by prefetching it back; also time the move to the host. pinned (run plainly): time a
pinned host-to-device copy of the same size.
"""

import ctypes
import json
import statistics
import sys
import time

import torch

REPEATS = 3
LOCATION_DEVICE, LOCATION_HOST = 1, 2


class MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


def prefetch(tensor, location_type):
    """Move a tensor's managed memory to the device or the host, and wait for it."""
    driver = ctypes.CDLL("libcuda.so.1")
    nbytes = tensor.numel() * tensor.element_size()
    status = driver.cuMemPrefetchAsync_v2(ctypes.c_ulonglong(tensor.data_ptr()),
                                          ctypes.c_size_t(nbytes),
                                          MemLocation(location_type, 0), ctypes.c_uint(0),
                                          ctypes.c_void_p(0))
    if status != 0:
        raise RuntimeError(f"cuMemPrefetchAsync_v2 failed with CUresult {status}")
    torch.cuda.synchronize()


def median_gbps(nbytes, prepare, action) -> float:
    samples = []
    for _ in range(REPEATS):
        prepare()
        torch.cuda.synchronize()
        start = time.perf_counter()
        action()
        torch.cuda.synchronize()
        samples.append(nbytes / (time.perf_counter() - start) / 1e9)
    return statistics.median(samples)


def managed(count: int) -> dict:
    data = torch.ones(count, device="cuda")
    size = count * 4
    result = {
        "fault_h2d_gbps": median_gbps(size, lambda: prefetch(data, LOCATION_HOST),
                                      lambda: data.sum()),
        "prefetch_h2d_gbps": median_gbps(size, lambda: prefetch(data, LOCATION_HOST),
                                         lambda: prefetch(data, LOCATION_DEVICE)),
        "prefetch_d2h_gbps": median_gbps(size, lambda: prefetch(data, LOCATION_DEVICE),
                                         lambda: prefetch(data, LOCATION_HOST)),
    }
    assert bool((data == 1).all())  # the data survived every round trip
    return result


def pinned(count: int) -> dict:
    host = torch.ones(count, pin_memory=True)
    device = torch.empty(count, device="cuda")
    return {"pinned_h2d_gbps": median_gbps(count * 4, lambda: None,
                                           lambda: device.copy_(host, non_blocking=True))}


if __name__ == "__main__":
    mode, gib = sys.argv[1], float(sys.argv[2])
    count = int(gib * (1 << 30)) // 4
    result = managed(count) if mode == "managed" else pinned(count)
    print(json.dumps({**result, "bytes": count * 4}))
