"""The DRA driver's two gRPC services for the kubelet, each on a Unix socket of its own:

- DRAPlugin (NodePrepareResources, NodeUnprepareResources), in both the v1 and the v1beta1
  package, on `<plugins dir>/gpu.gemshare.io/dra.sock`;
- plugin registration on `<registry dir>/gpu.gemshare.io-reg.sock`, which the kubelet's plugin
  watcher finds, asks GetInfo (a DRAPlugin, its name, the socket above, the versions) and
  answers with NotifyRegistrationStatus.

A kubelet that restarts finds the registration socket again; one that removed it (or a socket
that vanished) gets a new one at the next check (ensure()). Claims are prepared one at a time:
a claim's spec is written whole before the next is looked at.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent import futures
from pathlib import Path

from gemshare_nvs.kubernetes.claim_devices import DRIVER

from . import kubelet_api, registration_api
from .claims import ClaimRef, PrepareError, Preparer

log = logging.getLogger("gemshare-dra-plugin")
WORKERS = 4


def plugin_socket(plugins_dir: str) -> Path:
    return Path(plugins_dir) / DRIVER / "dra.sock"


def registration_socket(registry_dir: str) -> Path:
    return Path(registry_dir) / f"{DRIVER}-reg.sock"


class _Server:
    """One gRPC server on the Unix socket `path`, serving `services` (name -> methods, each
    name -> (handler, request class, response class))."""

    def __init__(self, path: Path, services: dict):
        import grpc

        self.path = path
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=WORKERS))
        self._server.add_generic_rpc_handlers(tuple(
            grpc.method_handlers_generic_handler(service, {
                name: grpc.unary_unary_rpc_method_handler(
                    handler, request_deserializer=request.FromString,
                    response_serializer=response.SerializeToString)
                for name, (handler, request, response) in methods.items()})
            for service, methods in services.items()))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)  # a socket left by a driver that stopped
        try:
            bound = self._server.add_insecure_port(f"unix://{path}")
        except RuntimeError:  # how newer gRPC releases say it
            bound = 0
        if not bound:
            raise OSError(f"cannot listen on {path}")
        self._server.start()
        self._inode = os.stat(path).st_ino

    def intact(self) -> bool:
        """Whether the socket file is still ours."""
        try:
            return os.stat(self.path).st_ino == self._inode
        except OSError:
            return False

    def stop(self) -> None:
        self._server.stop(1).wait(5)
        if self.intact():
            self.path.unlink(missing_ok=True)


class KubeletServices:
    def __init__(self, preparer: Preparer, plugins_dir: str, registry_dir: str):
        self.preparer = preparer
        self.plugin_path = plugin_socket(plugins_dir)
        self.registration_path = registration_socket(registry_dir)
        self.registered = threading.Event()  # the kubelet said so
        self._lock = threading.Lock()  # one claim at a time
        self._plugin: _Server | None = None
        self._registration: _Server | None = None

    def ensure(self) -> None:
        """Start what is not running, and again what lost its socket."""
        if self._plugin is None or not self._plugin.intact():
            if self._plugin is not None:
                log.warning("%s is gone: serving it anew", self.plugin_path)
                self._plugin.stop()
            self._plugin = _Server(self.plugin_path, self._dra_services())
            log.info("DRA service (%s) on %s", ", ".join(kubelet_api.VERSIONS), self.plugin_path)
        if self._registration is None or not self._registration.intact():
            if self._registration is not None:
                log.warning("%s is gone: registering anew", self.registration_path)
                self._registration.stop()
                self.registered.clear()
            messages = registration_api.messages()
            self._registration = _Server(self.registration_path, {
                f"{registration_api.PACKAGE}.{registration_api.SERVICE}": {
                    method: (getattr(self, f"_{method}"), messages[request], messages[response])
                    for method, (request, response) in registration_api.METHODS.items()}})
            log.info("registration for the kubelet on %s", self.registration_path)

    def stop(self) -> None:
        for server in (self._registration, self._plugin):
            if server is not None:
                server.stop()
        self._plugin = self._registration = None

    # ----- plugin registration

    def _GetInfo(self, request, context):
        return registration_api.messages()["PluginInfo"](
            type=registration_api.DRA_PLUGIN_TYPE, name=DRIVER, endpoint=str(self.plugin_path),
            supported_versions=[kubelet_api.SUPPORTED_VERSION[version]
                                for version in kubelet_api.VERSIONS])

    def _NotifyRegistrationStatus(self, request, context):
        if request.plugin_registered:
            if not self.registered.is_set():
                log.info("registered with the kubelet")
            self.registered.set()
        else:
            log.error("the kubelet refused the registration: %s", request.error)
            self.registered.clear()
        return registration_api.messages()["RegistrationStatusResponse"]()

    # ----- DRAPlugin

    def _dra_services(self) -> dict:
        services = {}
        for version in kubelet_api.VERSIONS:
            messages = kubelet_api.messages(version)
            handlers = {"NodePrepareResources": self._prepare_handler(version),
                        "NodeUnprepareResources": self._unprepare_handler(version)}
            services[f"{kubelet_api.package(version)}.{kubelet_api.SERVICE}"] = {
                method: (handlers[method], messages[request], messages[response])
                for method, (request, response) in kubelet_api.METHODS.items()}
        return services

    def _each(self, claims, act) -> dict:
        """claim UID -> the error acting on it ("" for none)."""
        errors = {}
        for claim in claims:
            ref = ClaimRef(claim.namespace, claim.uid, claim.name)
            try:
                with self._lock:
                    errors[claim.uid] = act(ref) or ""
            except PrepareError as error:
                log.warning("claim %s: %s", ref.qualified, error)
                errors[claim.uid] = str(error)
            except Exception as exc:  # a bug costs this claim, not the others or the server
                log.exception("claim %s failed", ref.qualified)
                errors[claim.uid] = f"internal error ({type(exc).__name__}: {exc})"
        return errors

    def _prepare_handler(self, version: str):
        messages = kubelet_api.messages(version)

        def prepare(request, context):
            devices: dict[str, list] = {}

            def act(ref: ClaimRef) -> str:
                devices[ref.uid] = self.preparer.prepare(ref)
                log.info("claim %s prepared: %s", ref.qualified,
                         ", ".join(cdi for one in devices[ref.uid] for cdi in one.cdi_device_ids))
                return ""

            errors = self._each(request.claims, act)
            answers = {}
            for uid, error in errors.items():
                if error:
                    answers[uid] = messages["NodePrepareResourceResponse"](error=error)
                    continue
                answers[uid] = messages["NodePrepareResourceResponse"](devices=[
                    messages["Device"](request_names=one.request_names, pool_name=one.pool_name,
                                       device_name=one.device_name,
                                       cdi_device_ids=one.cdi_device_ids,
                                       **({"share_id": one.share_id}
                                          if one.share_id and version == "v1" else {}))
                    for one in devices[uid]])
            return messages["NodePrepareResourcesResponse"](claims=answers)
        return prepare

    def _unprepare_handler(self, version: str):
        messages = kubelet_api.messages(version)

        def unprepare(request, context):
            def act(ref: ClaimRef) -> str:
                self.preparer.unprepare(ref)
                log.info("claim %s unprepared", ref.qualified)
                return ""

            return messages["NodeUnprepareResourcesResponse"](claims={
                uid: messages["NodeUnprepareResourceResponse"](error=error)
                for uid, error in self._each(request.claims, act).items()})
        return unprepare
