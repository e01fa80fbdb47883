"""The slots advertised right now, and a way for ListAndWatch streams to wait for a change."""

from __future__ import annotations

import logging
import threading

from . import api
from .gpu_health import Gpu
from .slots import MAX_ID_LENGTH, slot_ids

log = logging.getLogger("gemshare-device-plugin")


class DeviceList:
    def __init__(self, slots: int):
        self.slots = slots
        self._changed = threading.Condition()
        self._gpus: tuple[Gpu, ...] = ()
        self._generation = 0

    def update(self, gpus: list[Gpu]) -> bool:
        """Take the GPUs from a health check; True (and streams woken) when anything changed."""
        usable = []
        for gpu in gpus:
            if len(slot_ids(gpu.uuid, self.slots)[-1]) > MAX_ID_LENGTH:
                log.error("GPU %s has a UUID too long for a device ID; not advertised", gpu.uuid)
            else:
                usable.append(gpu)
        with self._changed:
            if tuple(usable) == self._gpus:
                return False
            before = {gpu.uuid: gpu.healthy for gpu in self._gpus}
            for gpu in usable:
                if before.get(gpu.uuid) != gpu.healthy:
                    log.info("GPU %d %s: %d slots %s", gpu.index, gpu.uuid, self.slots,
                             api.HEALTHY if gpu.healthy else api.UNHEALTHY)
            self._gpus = tuple(usable)
            self._generation += 1
            self._changed.notify_all()
            return True

    def snapshot(self) -> tuple[int, list]:
        """(generation, the Device messages to send)."""
        with self._changed:
            gpus, generation = self._gpus, self._generation
        devices = [api.Device(ID=device_id, health=api.HEALTHY if gpu.healthy else api.UNHEALTHY)
                   for gpu in gpus for device_id in slot_ids(gpu.uuid, self.slots)]
        return generation, devices

    def indices(self) -> dict[str, int]:
        """Each advertised GPU's index, by UUID."""
        with self._changed:
            return {gpu.uuid: gpu.index for gpu in self._gpus}

    def wait(self, generation: int, timeout: float) -> bool:
        """Wait until the list is newer than `generation`, wake() is called, or `timeout`
        passes; True when it is newer."""
        with self._changed:
            if self._generation == generation:
                self._changed.wait(timeout)
            return self._generation != generation

    def wake(self) -> None:
        """Let every waiting stream look at whether it should end."""
        with self._changed:
            self._changed.notify_all()
