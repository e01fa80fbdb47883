"""Device names and memory from NVML, when pynvml is importable and a driver answers.

Without either (CI, containers without a GPU) `Gpus.available` is False and the scheduler runs
exactly as before: its status lacks names and memory figures, and mode auto takes each device's
capacity from what the clients' drivers report instead.
"""

from __future__ import annotations

import warnings


class Gpus:
    def __init__(self):
        self.available = False
        self.reason = ""
        try:
            with warnings.catch_warnings():  # the old `pynvml` wrapper warns on import
                warnings.simplefilter("ignore")
                import pynvml
            pynvml.nvmlInit()
        except Exception as exc:  # ImportError, NVMLError, OSError from a broken driver
            self.reason = f"NVML unavailable ({type(exc).__name__}: {exc})"
            return
        self._nvml = pynvml
        self.available = True

    def describe(self) -> list[dict] | None:
        """index, name, uuid, memory_total_bytes, memory_used_bytes per GPU; None without
        NVML."""
        if not self.available:
            return None
        nvml = self._nvml
        result = []
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                name = nvml.nvmlDeviceGetName(handle)
                uuid = nvml.nvmlDeviceGetUUID(handle)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                result.append({"index": index,
                               "name": name.decode() if isinstance(name, bytes) else name,
                               "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
                               "memory_total_bytes": int(memory.total),
                               "memory_used_bytes": int(memory.used)})
        except Exception:  # a GPU that fell off the bus must not break status
            return result or None
        return result

    def close(self) -> None:
        if self.available:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self.available = False
