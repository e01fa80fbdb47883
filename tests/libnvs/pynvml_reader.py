"""What NVML says of every GPU, read with pynvml (nvidia-ml-py) as a monitoring script reads it:
memory (nvmlDeviceGetMemoryInfo and its _v2) and the compute processes. Prints one JSON object:
{"gpus": [{"total", "used", "free", "v2": {"total", "reserved", "used", "free"},
"processes": [[pid, bytes], ...]}, ...], "threads": N}. Used by tests/libnvs and tests/gpu."""

import json
import os

import pynvml


def read() -> dict:
    pynvml.nvmlInit()
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            v2 = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
            processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            gpus.append({"total": memory.total, "used": memory.used, "free": memory.free,
                         "v2": {"total": v2.total, "reserved": v2.reserved, "used": v2.used,
                                "free": v2.free},
                         "processes": [[p.pid, p.usedGpuMemory] for p in processes]})
    finally:
        pynvml.nvmlShutdown()
    return {"gpus": gpus, "threads": len(os.listdir("/proc/self/task"))}


if __name__ == "__main__":
    print(json.dumps(read()))
