"""One resource's units advertised right now, and a way for ListAndWatch streams to wait for a
change."""

from __future__ import annotations

import logging
import threading

from . import api
from .gpu_health import Gpu
from .resources import Resource
from .slots import MAX_ID_LENGTH

log = logging.getLogger("gemshare-device-plugin")

# The kubelet reads a ListAndWatch answer with gRPC's default limit of 4 MiB, and a device
# takes up to some 80 bytes in it (an ID of at most 63 characters, its health, the framing): a
# resource of more devices would never reach it.
MAX_DEVICES = 40_000


class DeviceList:
    def __init__(self, resource: Resource):
        self.resource = resource
        self._changed = threading.Condition()
        self._gpus: tuple[Gpu, ...] = ()
        self._generation = 0
        self._refused_said = ""

    def update(self, gpus: list[Gpu]) -> bool:
        """Take the GPUs from a health check; True (and streams woken) when anything changed."""
        resource = self.resource
        usable = []
        for gpu in gpus:
            count = resource.count(gpu)
            if count and len(resource.device_id(gpu.uuid, count - 1)) > MAX_ID_LENGTH:
                log.error("GPU %s has a UUID too long for a device ID; its %s not advertised",
                          gpu.uuid, resource.name)
            else:
                usable.append(gpu)
        total = sum(resource.count(gpu) for gpu in usable)
        if total > MAX_DEVICES:
            refusal = (f"{resource.name}: {len(usable)} GPUs with {resource.per_gpu_words()} "
                       f"are {total:,} devices, more than the {MAX_DEVICES:,} the kubelet takes "
                       f"in one list; none advertised (give a larger --memory-unit)")
            if refusal != self._refused_said:
                log.error("%s", refusal)
                self._refused_said = refusal
            usable = []
        with self._changed:
            if tuple(usable) == self._gpus:
                return False
            before = {gpu.uuid: (gpu.healthy, resource.count(gpu)) for gpu in self._gpus}
            for gpu in usable:
                now = (gpu.healthy, resource.count(gpu))
                if before.get(gpu.uuid) != now:
                    log.info("GPU %d %s: %s %s", gpu.index, gpu.uuid, resource.amount(now[1]),
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
                   for gpu in gpus for device_id in self.resource.ids(gpu)]
        return generation, devices

    def indices(self) -> dict[str, int]:
        """Each advertised GPU's index, by UUID."""
        return self.layout()[0]

    def counts(self) -> dict[str, int]:
        """How many units each advertised GPU has, by UUID."""
        return self.layout()[1]

    def layout(self) -> tuple[dict[str, int], dict[str, int]]:
        """indices() and counts() of one moment."""
        with self._changed:
            gpus = self._gpus
        return ({gpu.uuid: gpu.index for gpu in gpus},
                {gpu.uuid: self.resource.count(gpu) for gpu in gpus})

    def named(self, uuid: str) -> str:
        """A GPU as messages name it: "GPU 0 (GPU-8f3c...)", or its UUID alone when it is not
        advertised."""
        index = self.indices().get(uuid)
        return uuid if index is None else f"GPU {index} ({uuid})"

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
