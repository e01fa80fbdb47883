"""A stand-in for NVIDIA's pynvml, so the scheduler's NVML path runs where no GPU is.

Put this folder first on PYTHONPATH. FAKE_NVML_GPUS is a JSON list of
{"name", "uuid", "total", "used"} and optionally "pcie": [generation, width] (without it the
PCIe queries answer Not Supported, as for a GPU with no PCIe host link), "pci_bus_id" (default
00000000:<10 + index>:00.0), "numa" (without it the NUMA query answers Not Supported) and
"minor" (its /dev/nvidiaN, default its index), "compute" and "mps": lists of [pid, used bytes
or null] (the GPU's processes; without "compute" its list answers Not Supported); the driver
is 550.54.15 with CUDA 12.4; FAKE_NVML_BYTES=1 answers names and UUIDs as bytes (as old
pynvml releases do); FAKE_NVML_INIT_ERROR makes nvmlInit fail with that text;
FAKE_NVML_FAIL_AT=N makes every query of GPU N fail, as a GPU that fell off the bus does.
"""

import json
import os
from types import SimpleNamespace


class NVMLError(Exception):
    pass


def _gpus() -> list[dict]:
    return json.loads(os.environ.get("FAKE_NVML_GPUS", "[]"))


def _text(value: str):
    return value.encode() if os.environ.get("FAKE_NVML_BYTES") == "1" else value


def _gpu(handle: int) -> dict:
    if str(handle) == os.environ.get("FAKE_NVML_FAIL_AT"):
        raise NVMLError("GPU is lost")
    return _gpus()[handle]


def nvmlInit():
    if "FAKE_NVML_INIT_ERROR" in os.environ:
        raise NVMLError(os.environ["FAKE_NVML_INIT_ERROR"])


def nvmlShutdown():
    path = os.environ.get("FAKE_NVML_SHUTDOWN_FILE")
    if path:
        with open(path, "a") as marker:
            marker.write("shutdown\n")


def nvmlDeviceGetCount():
    return len(_gpus())


def nvmlDeviceGetHandleByIndex(index):
    return index


def nvmlDeviceGetName(handle):
    return _text(_gpu(handle)["name"])


def nvmlDeviceGetUUID(handle):
    return _text(_gpu(handle)["uuid"])


def nvmlDeviceGetMemoryInfo(handle):
    gpu = _gpu(handle)
    return SimpleNamespace(total=gpu["total"], used=gpu["used"], free=gpu["total"] - gpu["used"])


def _pcie(handle: int) -> list[int]:
    pcie = _gpu(handle).get("pcie")
    if pcie is None:
        raise NVMLError("Not Supported")
    return pcie


def nvmlDeviceGetMaxPcieLinkGeneration(handle):
    return _pcie(handle)[0]


def nvmlDeviceGetMaxPcieLinkWidth(handle):
    return _pcie(handle)[1]


def nvmlSystemGetDriverVersion():
    return _text("550.54.15")


def nvmlSystemGetCudaDriverVersion():
    return 12040


def nvmlDeviceGetPciInfo(handle):
    bus_id = _gpu(handle).get("pci_bus_id", f"00000000:{0x10 + handle:02X}:00.0")
    return SimpleNamespace(busId=_text(bus_id))


def nvmlDeviceGetNumaNodeId(handle):
    numa = _gpu(handle).get("numa")
    if numa is None:
        raise NVMLError("Not Supported")
    return numa


def nvmlDeviceGetMinorNumber(handle):
    return _gpu(handle).get("minor", handle)


def _processes(handle, kind: str) -> list:
    listed = _gpu(handle).get(kind)
    if listed is None:
        raise NVMLError("Not Supported")
    return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in listed]


def nvmlDeviceGetComputeRunningProcesses(handle):
    return _processes(handle, "compute")


def nvmlDeviceGetMPSComputeRunningProcesses(handle):
    return _processes(handle, "mps")
