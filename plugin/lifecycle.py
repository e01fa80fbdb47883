"""The plugin's life beside the kubelet's: serve, register, and start over when the kubelet does.

A restarting kubelet deletes every socket in its device-plugin directory, its own
`kubelet.sock` and ours alike, then makes a new `kubelet.sock` and forgets every plugin. So the
directory is looked at every `poll_interval` seconds (a stat of a few files, cheap enough that
no inotify is needed), and for each of the three resources (endpoint.py):

- when its socket is gone or is another file, it is served again on a new one and registered
  again;
- when `kubelet.sock` is another file than the one it registered through, the kubelet restarted
  even if its socket survived: it is served again (dropping streams of the old kubelet) and
  registered;
- when `kubelet.sock` is missing we wait for it, saying so once; when a registration fails it is
  tried again after 1, 2, 4 ... up to `max_backoff` seconds, at once when a new `kubelet.sock`
  appears;
- when the kubelet refuses in words that say every try will be refused (the resource name, the
  API version), that kubelet is not asked again for that resource: only a new `kubelet.sock` is.

NVML is checked every `health_interval` seconds, once for all three resources, and a change
reaches the kubelet through each open ListAndWatch stream. Nothing here ends the program but
`stop`. `last_round` and `readiness()` say how it is doing, for the health endpoint (health.py).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
import time
from typing import Sequence

from . import api
from .allocation import Paths
from .devices import DeviceList
from .endpoint import Endpoint
from .gpu_health import GpuHealth
from .placement import Placement
from .resources import Resource
from .server import identity
from .service import DevicePluginService

log = logging.getLogger("gemshare-device-plugin")

# NVIDIA's device plugin serves nvidia.com/gpu on nvidia-gpu.sock (and MIG resources on
# nvidia-mig-*.sock) in the same directory.
NVIDIA_PLUGIN_SOCKETS = re.compile(r"nvidia-.*\.sock")


class Plugin:
    def __init__(self, socket_dir: str, resources: Sequence[Resource], paths: Paths,
                 health: GpuHealth | None = None, poll_interval: float = 1.0,
                 health_interval: float = 5.0, register_timeout: float = 5.0,
                 max_backoff: float = 30.0):
        self.socket_dir = socket_dir
        self.kubelet_socket = os.path.join(socket_dir, api.KUBELET_SOCKET)
        self.lists = {resource.name: DeviceList(resource) for resource in resources}
        self.placement = Placement(self.lists)
        self.endpoints = [Endpoint(socket_dir, name,
                                   functools.partial(DevicePluginService, devices, paths,
                                                     self.placement),
                                   register_timeout, max_backoff)
                          for name, devices in self.lists.items()]
        self.health = health or GpuHealth()
        self.poll_interval = poll_interval
        self.health_interval = health_interval
        self._waiting_said = False
        self.last_round = time.monotonic()  # when the loop last went round
        self._nvidia_said: set[str] = set()

    @property
    def registrations(self) -> int:
        """Successful registrations so far, of every resource."""
        return sum(endpoint.registrations for endpoint in self.endpoints)

    def readiness(self) -> str | None:
        """None while every resource is served and registered with the kubelet there now, else
        why the first that is not is not."""
        kubelet = identity(self.kubelet_socket)
        for endpoint in self.endpoints:
            why = endpoint.readiness(kubelet)
            if why is not None:
                return f"{endpoint.resource_name}: {why}"
        return None

    def run(self, stop: threading.Event) -> None:
        for devices in self.lists.values():
            log.info("advertising %s: %s, on %s", devices.resource.name,
                     devices.resource.per_gpu_words(),
                     os.path.join(self.socket_dir, self.endpoint_of(devices.resource.name)))
        next_health = 0.0
        try:
            while not stop.is_set():
                now = self.last_round = time.monotonic()
                try:
                    if now >= next_health:
                        next_health = now + self.health_interval
                        gpus = self.health.check()
                        for devices in self.lists.values():
                            devices.update(gpus)
                    self._keep_registered(now)
                except Exception:  # a node keeps its plugin; the next round starts afresh
                    log.exception("unexpected error; carrying on")
                stop.wait(self.poll_interval)
        finally:
            for endpoint in self.endpoints:
                endpoint.stop()
            self.health.close()
            log.info("stopped")

    def endpoint_of(self, resource_name: str) -> str:
        """The socket file name a resource is served on."""
        return next(endpoint.endpoint for endpoint in self.endpoints
                    if endpoint.resource_name == resource_name)

    def _keep_registered(self, now: float) -> None:
        kubelet = identity(self.kubelet_socket)
        if kubelet is None and not self._waiting_said:
            log.warning("waiting for the kubelet's socket %s (is the kubelet running, and is "
                        "--kubelet-socket-dir its device-plugins directory?)",
                        self.kubelet_socket)
        self._waiting_said = kubelet is None
        registered = [endpoint.keep_registered(kubelet, now) for endpoint in self.endpoints]
        if any(registered):
            self._warn_of_nvidia_plugin()

    def _warn_of_nvidia_plugin(self) -> None:
        """Said once per socket: the kubelet may give a pod one of these GPUs whole through
        NVIDIA's plugin while it gives other pods units of it through ours."""
        try:
            names = set(filter(NVIDIA_PLUGIN_SOCKETS.fullmatch, os.listdir(self.socket_dir)))
        except OSError:
            return
        for name in sorted(names - self._nvidia_said):
            log.warning("NVIDIA's device plugin serves on this node too (%s): a GPU it hands "
                        "out whole may also have %s units handed out; run the two on separate "
                        "nodes (README: Deploying on Kubernetes)", name,
                        ", ".join(self.lists))
        self._nvidia_said |= names
