"""What the NVIDIA driver says of this machine, for `gemsharectl doctor`: whether libcuda.so.1
loads and initializes, whether each device supports managed memory (which libnvs.so turns every
allocation into), and the GPUs NVML lists.

Run as a child process (`python -m gemshare_ctl.gpu_probe`, printing one JSON object), without
LD_PRELOAD: a driver that crashes or hangs takes only the child with it, and a libnvs.so
preloaded into gemsharectl's own environment does not see these calls as a program's.
"""

from __future__ import annotations

import ctypes
import json
import warnings

DRIVER = "libcuda.so.1"
CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY = 83
NAME_BYTES = 256


def _error_name(cuda, code: int) -> str:
    name = ctypes.c_char_p()
    try:
        if cuda.cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
            return name.value.decode(errors="replace")
    except AttributeError:  # a driver without cuGetErrorName
        pass
    return f"CUDA error {code}"


def driver() -> dict:
    """{"loaded": False, "error": why} or {"loaded": True, "init_error": NAME or None,
    "version": N, "devices": [{"index", "name", "managed_memory"}]}."""
    try:
        cuda = ctypes.CDLL(DRIVER)
    except OSError as error:
        return {"loaded": False, "error": str(error)}
    found: dict = {"loaded": True, "init_error": None, "version": None, "devices": []}
    code = cuda.cuInit(0)
    if code != 0:
        found["init_error"] = _error_name(cuda, code)
        return found
    version, count = ctypes.c_int(), ctypes.c_int()
    if cuda.cuDriverGetVersion(ctypes.byref(version)) == 0:
        found["version"] = version.value
    code = cuda.cuDeviceGetCount(ctypes.byref(count))
    if code != 0:
        found["init_error"] = _error_name(cuda, code)
        return found
    for index in range(count.value):
        device, managed = ctypes.c_int(), ctypes.c_int()
        name = ctypes.create_string_buffer(NAME_BYTES)
        entry: dict = {"index": index, "name": None, "managed_memory": None}
        if cuda.cuDeviceGet(ctypes.byref(device), index) == 0:
            if cuda.cuDeviceGetName(name, NAME_BYTES, device) == 0:
                entry["name"] = name.value.decode(errors="replace")
            code = cuda.cuDeviceGetAttribute(ctypes.byref(managed),
                                             CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, device)
            entry["managed_memory"] = bool(managed.value) if code == 0 else None
        found["devices"].append(entry)
    return found


def nvml() -> dict:
    """{"error": why} or {"error": None, "gpus": [{"index", "name", "memory_total_bytes"}]}."""
    try:
        with warnings.catch_warnings():  # the old `pynvml` wrapper warns on import
            warnings.simplefilter("ignore")
            import pynvml
        pynvml.nvmlInit()
    except Exception as error:  # ImportError, NVMLError (no library, no driver), OSError
        return {"error": f"{type(error).__name__}: {error}"}
    gpus = []
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            gpus.append({"index": index,
                         "name": name.decode() if isinstance(name, bytes) else name,
                         "memory_total_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)})
    except Exception as error:  # a GPU fallen off the bus: say so, with those read before it
        return {"error": f"{type(error).__name__}: {error}", "gpus": gpus}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return {"error": None, "gpus": gpus}


if __name__ == "__main__":
    print(json.dumps({"driver": driver(), "nvml": nvml()}))
