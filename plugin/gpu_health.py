"""Which GPUs this node has and whether each is healthy, as NVML tells it.

A GPU is healthy while NVML can still read it (handle, UUID at its index, memory) and it has
reported no critical XID error. Its memory's size, as NVML last read it, sets how many memory
units it has (resources.py). A GPU NVML cannot read at all when we first look cannot be
named, so it is left out and looked for again at the next check; one read before stays in the
list, unhealthy, so that the kubelet stops giving out its units but keeps the pods it has. XIDs
that an application causes by itself (a bad kernel, a page fault, a preempted context) say
nothing about the GPU and are ignored; any other critical XID marks the GPU unhealthy until the
plugin restarts, since NVML never says that the GPU recovered.

No NVML (no driver, no pynvml) is not an error: the node then has no GPUs to advertise, and
every check tries to start NVML again.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

log = logging.getLogger("gemshare-device-plugin")

# Graphics engine exception, GPU memory page fault, reset channel verification error,
# preemptive cleanup, video processor exception, and a reset of a single channel: raised by
# one application's work, not by a failing GPU.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    healthy: bool
    memory_bytes: int = 0  # total, as last read; 0 until NVML has read it


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class GpuHealth:
    """Call check() now and then; each call returns every GPU known so far, by index."""

    def __init__(self, nvml=None):
        self._nvml = nvml  # a pynvml-like module; None: import pynvml at the first check
        self._started = False
        self._reason_logged = ""
        self._uuids: dict[int, str] = {}  # index -> UUID, once read
        self._memory: dict[str, int] = {}  # UUID -> total bytes, as last read
        self._failed_xid: set[str] = set()
        self._events = None
        self._watched: set[str] = set()  # GPUs registered for XID events

    def check(self) -> list[Gpu]:
        if not self._started and not self._start():
            return self._report({})
        self._discover()
        self._read_events()
        readable = {index: self._readable(index, uuid) for index, uuid in self._uuids.items()}
        return self._report(readable)

    def close(self) -> None:
        if self._started:
            try:
                if self._events is not None:
                    self._nvml.nvmlEventSetFree(self._events)
            except Exception:
                pass
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self._started = False

    def _report(self, readable: dict[int, bool]) -> list[Gpu]:
        return [Gpu(index, uuid, readable.get(index, False) and uuid not in self._failed_xid,
                    self._memory.get(uuid, 0))
                for index, uuid in sorted(self._uuids.items())]

    def _start(self) -> bool:
        try:
            if self._nvml is None:
                with warnings.catch_warnings():  # the old `pynvml` wrapper warns on import
                    warnings.simplefilter("ignore")
                    import pynvml
                self._nvml = pynvml
            self._nvml.nvmlInit()
        except Exception as exc:  # ImportError, NVMLError, OSError from a broken driver
            reason = f"NVML unavailable ({type(exc).__name__}: {exc})"
            if reason != self._reason_logged:
                log.warning("%s: no GPUs to advertise; trying again at the next health check",
                            reason)
                self._reason_logged = reason
            return False
        self._started = True
        self._reason_logged = ""
        try:
            self._events = self._nvml.nvmlEventSetCreate()
        except Exception:  # an NVML (or stand-in) without events: health from reads alone
            self._events = None
        return True

    def _discover(self) -> None:
        nvml = self._nvml
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:
            log.warning("NVML cannot count the GPUs (%s: %s)", type(exc).__name__, exc)
            return
        for index in range(count):
            if index in self._uuids:
                continue
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            except Exception as exc:
                log.warning("GPU %d cannot be read by NVML (%s: %s); not advertised until "
                            "it can", index, type(exc).__name__, exc)
                continue
            if uuid in self._uuids.values() or not uuid:
                continue
            self._uuids[index] = uuid
            log.info("found GPU %d %s", index, uuid)
            self._watch(handle, uuid)

    def _watch(self, handle, uuid: str) -> None:
        if self._events is None or uuid in self._watched:
            return
        try:
            supported = int(self._nvml.nvmlDeviceGetSupportedEventTypes(handle))
            if supported & XID_CRITICAL_ERROR:
                self._nvml.nvmlDeviceRegisterEvents(handle, XID_CRITICAL_ERROR, self._events)
                self._watched.add(uuid)
        except Exception as exc:
            log.info("GPU %s reports no XID events (%s); its health comes from reads alone",
                     uuid, exc)

    def _read_events(self) -> None:
        if self._events is None:
            return
        for _ in range(1000):  # bounded: a storm of events must not hold the check up
            try:
                event = self._nvml.nvmlEventSetWait(self._events, 0)
            except Exception:  # a timeout: nothing more waiting
                return
            xid, uuid = -1, None
            try:
                xid = int(getattr(event, "eventData", -1))
                uuid = _text(self._nvml.nvmlDeviceGetUUID(event.device))
            except Exception:
                pass  # a GPU that cannot be told: the error is put on all of them
            if xid in APPLICATION_XIDS:
                continue
            failed = [uuid] if uuid else list(self._uuids.values())
            for each in failed:
                if each not in self._failed_xid:
                    log.error("GPU %s reported critical XID %d: its units are unhealthy until "
                              "the plugin restarts", each, xid)
                    self._failed_xid.add(each)

    def _readable(self, index: int, uuid: str) -> bool:
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            if _text(nvml.nvmlDeviceGetUUID(handle)) != uuid:
                return False
            self._memory[uuid] = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            return True
        except Exception:
            return False
