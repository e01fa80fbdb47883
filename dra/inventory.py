"""The node's GPUs as the DRA driver publishes them: each healthy GPU (plugin/gpu_health.py
decides which are) with what NVML says of it (product, memory, PCI address, NUMA node, its
/dev/nvidiaN), and the driver's and CUDA's versions. A GPU that turns unhealthy or goes away
leaves the list, so that no new claim is placed on it; a reading NVML cannot give is left out
of that GPU's attributes rather than guessed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gemshare_plugin.gpu_health import GpuHealth

log = logging.getLogger("gemshare-dra-plugin")


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    product: str
    memory_bytes: int
    pci_bus_id: str = ""  # "" where NVML does not say
    numa_node: int | None = None
    minor: int | None = None  # N of /dev/nvidiaN


@dataclass(frozen=True)
class Inventory:
    gpus: tuple[GpuInfo, ...] = ()
    driver_version: str = ""
    cuda_version: str = ""  # "12.4"


def _text(value) -> str:
    return (value.decode() if isinstance(value, bytes) else str(value)).strip()


def _read(what, *args):
    """NVML's answer, or None where it has none (Not Supported, an old driver)."""
    try:
        return what(*args)
    except Exception:
        return None


class GpuInventory:
    """Call read() now and then: the GPUs to publish at that moment."""

    def __init__(self, nvml=None):
        self._nvml = nvml
        self._health = None

    def read(self) -> Inventory:
        if self._health is None:
            if self._nvml is None:
                try:
                    import pynvml
                except ImportError as exc:
                    log.warning("no NVML (%s): no GPUs to publish", exc)
                    return Inventory()
                self._nvml = pynvml
            self._health = GpuHealth(self._nvml)
        healthy = [gpu for gpu in self._health.check() if gpu.healthy and gpu.memory_bytes]
        if not healthy:
            return Inventory()
        nvml = self._nvml
        gpus = []
        for gpu in healthy:
            handle = _read(nvml.nvmlDeviceGetHandleByIndex, gpu.index)
            if handle is None:
                continue
            pci = _read(nvml.nvmlDeviceGetPciInfo, handle)
            numa, minor = (_read(nvml.nvmlDeviceGetNumaNodeId, handle),
                           _read(nvml.nvmlDeviceGetMinorNumber, handle))
            gpus.append(GpuInfo(
                gpu.index, gpu.uuid, _text(_read(nvml.nvmlDeviceGetName, handle) or ""),
                gpu.memory_bytes, _text(getattr(pci, "busId", "") or "").lower(),
                int(numa) if numa is not None and int(numa) >= 0 else None,
                int(minor) if minor is not None else None))
        cuda = _read(nvml.nvmlSystemGetCudaDriverVersion)
        return Inventory(tuple(gpus), _text(_read(nvml.nvmlSystemGetDriverVersion) or ""),
                         f"{int(cuda) // 1000}.{int(cuda) % 1000 // 10}" if cuda else "")

    def close(self) -> None:
        if self._health is not None:
            self._health.close()
