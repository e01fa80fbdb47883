"""Device names and memory from NVML, when pynvml is importable and a driver answers.

The only place that calls NVML. What does not change while we run (each GPU's index, name, UUID,
total memory and the widest, fastest PCIe link it can have) is read once, at start; a status
request asks only for the memory in use.

Without pynvml or a driver (CI, containers without a GPU) `Gpus.available` is False and the
scheduler runs exactly as before: its status lacks names and memory figures, and mode auto takes
each device's capacity from what the clients' drivers report instead.
"""

from __future__ import annotations

import warnings

from ..core.rules.cost import link_prior_bps

# NVML's lists of a GPU's processes: CUDA programs, graphics programs, MPS servers' clients.
PROCESS_LISTS = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses",
                 "nvmlDeviceGetMPSComputeRunningProcesses")


class Gpus:
    def __init__(self):
        self.available = False
        self.reason = ""
        self._found: list[tuple[object, dict]] = []  # each GPU's NVML handle and fixed facts
        self._complete = True  # False when a GPU failed as they were read: the list ends there
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
        self._read_fixed_facts()

    def _read_fixed_facts(self) -> None:
        nvml = self._nvml
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                name = nvml.nvmlDeviceGetName(handle)
                uuid = nvml.nvmlDeviceGetUUID(handle)
                total = nvml.nvmlDeviceGetMemoryInfo(handle).total
                self._found.append((handle, {
                    "index": index,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
                    "memory_total_bytes": int(total), **self._pcie(handle)}))
        except Exception:  # a GPU that fell off the bus must not stop the scheduler
            self._complete = False

    def _pcie(self, handle) -> dict:
        """The PCIe generation and width the GPU's host link can run at, where NVML knows them
        (not the current ones: an idle link trains down to save power). Not every GPU has a
        PCIe host link (NVLink-C2C): then nothing."""
        try:
            return {"pcie_generation": int(self._nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
                    "pcie_width": int(self._nvml.nvmlDeviceGetMaxPcieLinkWidth(handle))}
        except Exception:  # NVMLError_NotSupported, or an older pynvml without the call
            return {}

    def link_priors(self) -> dict[int, float]:
        """Each GPU's expected bulk move rate over its host link in bytes per second, by index,
        where NVML knows the link (cost.link_prior_bps)."""
        priors = {}
        for _, facts in self._found:
            if "pcie_generation" in facts:
                bps = link_prior_bps(facts["pcie_generation"], facts["pcie_width"])
                if bps is not None:
                    priors[facts["index"]] = bps
        return priors

    def memory_totals(self) -> dict[int, int]:
        """Each GPU's memory in bytes, by index."""
        return {facts["index"]: facts["memory_total_bytes"] for _, facts in self._found}

    def indices_by_uuid(self) -> dict[str, int]:
        """Each GPU's index by UUID, so that clients are keyed by the GPU they really use."""
        return {facts["uuid"]: facts["index"] for _, facts in self._found if facts["uuid"]}

    def describe(self) -> list[dict] | None:
        """index, name, uuid, memory_total_bytes, memory_used_bytes per GPU; None without
        NVML, or when not even the first GPU answers."""
        if not self.available:
            return None
        result, complete = [], self._complete
        try:
            for handle, facts in self._found:
                used = self._nvml.nvmlDeviceGetMemoryInfo(handle).used
                result.append({**facts, "memory_used_bytes": int(used)})
        except Exception:  # a GPU that fell off the bus must not break status
            complete = False
        return result if complete else result or None

    def processes(self) -> dict[int, dict[int, int]]:
        """Each GPU's processes as NVML lists them (compute, graphics and MPS clients, which
        may appear in more than one list): GPU index -> pid -> device memory used (0 where
        NVML does not say). A GPU whose lists cannot be read is left out, so that nothing is
        concluded about its processes."""
        if not self.available:
            return {}
        listed = {}
        for handle, facts in self._found:
            found: dict[int, int] = {}
            for call in PROCESS_LISTS:
                try:
                    processes = getattr(self._nvml, call)(handle)
                except Exception:  # Not Supported, an older pynvml, a GPU off the bus
                    if call == PROCESS_LISTS[0]:
                        break  # without the CUDA programs nothing can be said of this GPU
                    continue
                for process in processes:
                    used = process.usedGpuMemory  # None: NVML_VALUE_NOT_AVAILABLE
                    found[int(process.pid)] = max(found.get(int(process.pid), 0),
                                                  int(used) if used is not None else 0)
            else:
                listed[facts["index"]] = found
        return listed

    def close(self) -> None:
        if self.available:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self.available = False
