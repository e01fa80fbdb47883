"""One resource's registration with the kubelet: its own socket in the kubelet's directory, its
own DevicePlugin service, and the Register call that names them.

The kubelet keeps one endpoint per resource name, so each of the plugin's three resources has a
socket of its own (`gemshare.io-gpu-memory.sock` for `gemshare.io/gpu-memory`), a ListAndWatch
stream of its own and a registration of its own, made again when the kubelet restarts and kept
apart from the others' refusals and retries; lifecycle.py drives them all from one loop.
"""

from __future__ import annotations

import logging
import os
from typing import Callable

import grpc

from . import api
from .server import PluginServer, ServeError, identity
from .service import DevicePluginService

log = logging.getLogger("gemshare-device-plugin")

# How the kubelet words the refusals that asking again cannot change: a resource name it does
# not take, an API version it does not speak. Anything else (it could not dial our socket, it
# is starting) may pass on a later try.
FINAL_REFUSALS = ("is invalid", "is not supported by kubelet")


class RegistrationFailed(Exception):
    def __init__(self, message: str, final: bool = False):
        super().__init__(message)
        self.final = final  # this kubelet will refuse every later try alike


def register(kubelet_socket: str, endpoint: str, resource_name: str, timeout: float) -> None:
    """Tell the kubelet that `resource_name` is served on `endpoint` (a file name in its
    directory); raises RegistrationFailed saying why not."""
    request = api.RegisterRequest(
        version=api.VERSION, endpoint=endpoint, resource_name=resource_name,
        options=api.DevicePluginOptions(pre_start_required=False,
                                        get_preferred_allocation_available=True))
    with grpc.insecure_channel(f"unix://{kubelet_socket}") as channel:
        call = channel.unary_unary(api.method_path("Registration", "Register"),
                                   request_serializer=api.RegisterRequest.SerializeToString,
                                   response_deserializer=api.Empty.FromString)
        try:
            call(request, timeout=timeout)
        except grpc.RpcError as exc:
            details = exc.details() or ""
            raise RegistrationFailed(f"{exc.code().name}: {details}",
                                     final=any(words in details for words in FINAL_REFUSALS)) \
                from None


def endpoint_name(resource_name: str) -> str:
    """A resource's socket file name: one per resource, so that the resources, and two plugins
    of different resources, share the directory."""
    return resource_name.replace("/", "-") + ".sock"


class Endpoint:
    """Serves one resource on its socket and keeps it registered with the kubelet there now."""

    def __init__(self, socket_dir: str, resource_name: str,
                 make_service: Callable[[], DevicePluginService], register_timeout: float,
                 max_backoff: float):
        # Each serve gets a service of its own: one stopped with its server ends its streams
        # for good, and a stream of the next serve must not see that.
        self.make_service = make_service
        self.resource_name = resource_name
        self.endpoint = endpoint_name(self.resource_name)
        self.socket_path = os.path.join(socket_dir, self.endpoint)
        self.kubelet_socket = os.path.join(socket_dir, api.KUBELET_SOCKET)
        self.register_timeout = register_timeout
        self.max_backoff = max_backoff
        self.registrations = 0  # successful ones, for the log and for tests
        self._server: PluginServer | None = None
        self._serve_error = ""
        self._registered_through = None  # identity of kubelet.sock at the last registration
        self._attempted_through = None
        self._backoff = 0.0
        self._next_attempt = 0.0
        self._refused_by = None  # identity of the kubelet.sock that refused us for good
        self._refusal = ""

    def readiness(self, kubelet) -> str | None:
        """None while serving and registered with the kubelet whose socket is `kubelet` (its
        identity), else why not."""
        if self._server is None:
            return f"not serving on {self.socket_path}: {self._serve_error or 'starting'}"
        if kubelet is None:
            return f"no kubelet socket at {self.kubelet_socket}"
        if kubelet == self._refused_by:
            return f"the kubelet refused the registration: {self._refusal}"
        if kubelet != self._registered_through:
            return "not registered with the kubelet yet"
        return None

    def keep_registered(self, kubelet, now: float) -> bool:
        """Serve again where the socket or the kubelet changed, and register when due; True
        when it registered now."""
        if self._registered_through is not None and kubelet is not None \
                and kubelet != self._registered_through:
            log.info("the kubelet restarted (%s is a new socket): serving %s and registering "
                     "again", self.kubelet_socket, self.resource_name)
            self.stop()
        if self._server is not None and identity(self.socket_path) != self._server.identity:
            log.info("our socket %s was removed (the kubelet restarted?): serving and "
                     "registering again", self.socket_path)
            self.stop()
        if self._server is None and not self._serve():
            return False
        if kubelet is None or kubelet in (self._registered_through, self._refused_by):
            return False
        if kubelet == self._attempted_through and now < self._next_attempt:
            return False
        return self._register(kubelet, now)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        self._registered_through = None

    def _serve(self) -> bool:
        server = PluginServer(self.socket_path, self.make_service())
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

    def _register(self, kubelet, now: float) -> bool:
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
                return False
            self._backoff = min(self.max_backoff, max(1.0, self._backoff * 2))
            self._next_attempt = now + self._backoff
            log.warning("registering %s with the kubelet on %s failed (%s); trying again in "
                        "%g s", self.resource_name, self.kubelet_socket, exc, self._backoff)
            return False
        self._registered_through = kubelet
        self._backoff = 0.0
        self.registrations += 1
        log.info("registered %s with the kubelet on %s", self.resource_name, self.kubelet_socket)
        return True
