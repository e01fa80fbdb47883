"""The plugin's life beside the kubelet's: serve, register, and start over when the kubelet does.

A restarting kubelet deletes every socket in its device-plugin directory, its own
`kubelet.sock` and ours alike, then makes a new `kubelet.sock` and forgets every plugin. So the
directory is looked at every `poll_interval` seconds (a stat of two files, cheap enough that no
inotify is needed), and:

- when our socket is gone or is another file, we serve again on a new one and register again;
- when `kubelet.sock` is another file than the one we registered through, the kubelet restarted
  even if our socket survived: we serve again (dropping streams of the old kubelet) and register;
- when `kubelet.sock` is missing we wait for it, saying so once; when registration fails we try
  again after 1, 2, 4 ... up to `max_backoff` seconds, at once when a new `kubelet.sock` appears;
- when the kubelet refuses in words that say every try will be refused (the resource name, the
  API version), that kubelet is not asked again: only a new `kubelet.sock` is.

NVML is checked every `health_interval` seconds, and a change reaches the kubelet through the
open ListAndWatch stream. Nothing here ends the program but `stop`. `last_round` and
`readiness()` say how it is doing, for the health endpoint (health.py).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time

from . import api
from .allocation import Paths
from .devices import DeviceList
from .gpu_health import GpuHealth
from .registration import RegistrationFailed, register
from .server import PluginServer, ServeError, identity
from .service import DevicePluginService

log = logging.getLogger("gemshare-device-plugin")

# NVIDIA's device plugin serves nvidia.com/gpu on nvidia-gpu.sock (and MIG resources on
# nvidia-mig-*.sock) in the same directory.
NVIDIA_PLUGIN_SOCKETS = re.compile(r"nvidia-.*\.sock")


def endpoint_name(resource_name: str) -> str:
    """Our socket's file name: one per resource, so two plugins of different resources can
    share the directory."""
    return resource_name.replace("/", "-") + ".sock"


class Plugin:
    def __init__(self, socket_dir: str, resource_name: str, slots: int, paths: Paths,
                 health: GpuHealth | None = None, poll_interval: float = 1.0,
                 health_interval: float = 5.0, register_timeout: float = 5.0,
                 max_backoff: float = 30.0):
        self.socket_dir = socket_dir
        self.resource_name = resource_name
        self.endpoint = endpoint_name(resource_name)
        self.socket_path = os.path.join(socket_dir, self.endpoint)
        self.kubelet_socket = os.path.join(socket_dir, api.KUBELET_SOCKET)
        self.paths = paths
        self.devices = DeviceList(slots)
        self.health = health or GpuHealth()
        self.poll_interval = poll_interval
        self.health_interval = health_interval
        self.register_timeout = register_timeout
        self.max_backoff = max_backoff
        self.registrations = 0  # successful ones, for the log and for tests
        self._server: PluginServer | None = None
        self._serve_error = ""
        self._registered_through = None  # identity of kubelet.sock at the last registration
        self._attempted_through = None
        self._backoff = 0.0
        self._next_attempt = 0.0
        self._waiting_said = False
        self._refused_by = None  # identity of the kubelet.sock that refused us for good
        self._refusal = ""
        self.last_round = time.monotonic()  # when the loop last went round
        self._nvidia_said: set[str] = set()

    def readiness(self) -> str | None:
        """None while serving and registered with the kubelet there now, else why not."""
        kubelet = identity(self.kubelet_socket)
        if self._server is None:
            return f"not serving on {self.socket_path}: {self._serve_error or 'starting'}"
        if kubelet is None:
            return f"no kubelet socket at {self.kubelet_socket}"
        if kubelet == self._refused_by:
            return f"the kubelet refused the registration: {self._refusal}"
        if kubelet != self._registered_through:
            return "not registered with the kubelet yet"
        return None

    def run(self, stop: threading.Event) -> None:
        log.info("advertising %s: %d slots per GPU on %s", self.resource_name,
                 self.devices.slots, self.socket_path)
        next_health = 0.0
        try:
            while not stop.is_set():
                now = self.last_round = time.monotonic()
                try:
                    if now >= next_health:
                        next_health = now + self.health_interval
                        self.devices.update(self.health.check())
                    self._keep_registered(now)
                except Exception:  # a node keeps its plugin; the next round starts afresh
                    log.exception("unexpected error; carrying on")
                stop.wait(self.poll_interval)
        finally:
            self._stop_serving()
            self.health.close()
            log.info("stopped")

    def _keep_registered(self, now: float) -> None:
        kubelet = identity(self.kubelet_socket)
        if self._registered_through is not None and kubelet is not None \
                and kubelet != self._registered_through:
            log.info("the kubelet restarted (%s is a new socket): serving and registering again",
                     self.kubelet_socket)
            self._stop_serving()
        if self._server is not None and identity(self.socket_path) != self._server.identity:
            log.info("our socket %s was removed (the kubelet restarted?): serving and "
                     "registering again", self.socket_path)
            self._stop_serving()
        if self._server is None and not self._serve():
            return
        if kubelet is None:
            if not self._waiting_said:
                log.warning("waiting for the kubelet's socket %s (is the kubelet running, and is "
                            "--kubelet-socket-dir its device-plugins directory?)",
                            self.kubelet_socket)
                self._waiting_said = True
            return
        self._waiting_said = False
        if kubelet in (self._registered_through, self._refused_by):
            return
        if kubelet == self._attempted_through and now < self._next_attempt:
            return
        self._register(kubelet, now)

    def _serve(self) -> bool:
        server = PluginServer(self.socket_path, DevicePluginService(self.devices, self.paths))
        try:
            server.start()
        except ServeError as exc:
            if str(exc) != self._serve_error:
                log.error("%s; trying again", exc)
                self._serve_error = str(exc)
            server.stop()
            return False
        self._serve_error = ""
        self._server = server
        self._registered_through = None
        self._attempted_through = None
        return True

    def _stop_serving(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        self._registered_through = None

    def _register(self, kubelet, now: float) -> None:
        if kubelet != self._attempted_through:
            self._backoff = 0.0
        self._attempted_through = kubelet
        try:
            register(self.kubelet_socket, self.endpoint, self.resource_name,
                     self.register_timeout)
        except RegistrationFailed as exc:
            if exc.final:
                self._refused_by, self._refusal = kubelet, str(exc)
                log.error("the kubelet on %s refused to register %s (%s), as it will every "
                          "time: not asking it again; a restarted kubelet is asked afresh",
                          self.kubelet_socket, self.resource_name, exc)
                return
            self._backoff = min(self.max_backoff, max(1.0, self._backoff * 2))
            self._next_attempt = now + self._backoff
            log.warning("registering with the kubelet on %s failed (%s); trying again in %g s",
                        self.kubelet_socket, exc, self._backoff)
            return
        self._registered_through = kubelet
        self._backoff = 0.0
        self.registrations += 1
        log.info("registered %s with the kubelet on %s", self.resource_name, self.kubelet_socket)
        self._warn_of_nvidia_plugin()

    def _warn_of_nvidia_plugin(self) -> None:
        """Said once per socket: the kubelet may give a pod one of these GPUs whole through
        NVIDIA's plugin while it gives other pods slots of it through ours."""
        try:
            names = set(filter(NVIDIA_PLUGIN_SOCKETS.fullmatch, os.listdir(self.socket_dir)))
        except OSError:
            return
        for name in sorted(names - self._nvidia_said):
            log.warning("NVIDIA's device plugin serves on this node too (%s): a GPU it hands "
                        "out whole may also have %s slots handed out; run the two on separate "
                        "nodes (README: Deploying on Kubernetes)", name, self.resource_name)
        self._nvidia_said |= names
