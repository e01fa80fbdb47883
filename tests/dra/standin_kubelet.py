"""A stand-in kubelet for the DRA driver's tests: its plugin watcher's side of registration (find
the socket in the registry directory, GetInfo, NotifyRegistrationStatus) and its calls to the
driver's DRAPlugin service, in the version the kubelet would pick, over real gRPC."""

from __future__ import annotations

import time
from pathlib import Path

import grpc

from gemshare_dra import kubelet_api, registration_api

WAIT_S = 15.0
CALL_S = 10.0


def _call(channel, path: str, request, response_type):
    stub = channel.unary_unary(path, request_serializer=type(request).SerializeToString,
                               response_deserializer=response_type.FromString)
    return stub(request, timeout=CALL_S)


class StandInDraKubelet:
    def __init__(self, registry_dir: Path):
        self.registry_dir = registry_dir
        self.info = None
        self._channel = None

    def register(self, version: str = "v1"):
        """Find the driver's registration socket, ask what it is and say it is registered;
        the PluginInfo it gave. Talks `version` of DRAPlugin from then on."""
        deadline = time.monotonic() + WAIT_S
        while not (sockets := sorted(self.registry_dir.glob("*-reg.sock"))):
            assert time.monotonic() < deadline, f"no registration socket in {self.registry_dir}"
            time.sleep(0.05)
        messages = registration_api.messages()
        with grpc.insecure_channel(f"unix://{sockets[0]}") as channel:
            info = _call(channel, registration_api.method_path("GetInfo"),
                         messages["InfoRequest"](), messages["PluginInfo"])
            wanted = kubelet_api.SUPPORTED_VERSION[version]
            registered = info.type == "DRAPlugin" and wanted in info.supported_versions
            _call(channel, registration_api.method_path("NotifyRegistrationStatus"),
                  messages["RegistrationStatus"](
                      plugin_registered=registered,
                      error="" if registered else f"no {wanted} in {info.supported_versions}"),
                  messages["RegistrationStatusResponse"])
        assert registered, info
        self.info, self.version = info, version
        if self._channel is not None:
            self._channel.close()
        self._channel = grpc.insecure_channel(f"unix://{info.endpoint}")
        return info

    def _claims(self, claims):
        claim = kubelet_api.messages(self.version)["Claim"]
        return [claim(namespace=namespace, uid=uid, name=name) for namespace, uid, name in claims]

    def prepare(self, *claims: tuple[str, str, str]) -> dict:
        """claim UID -> NodePrepareResourceResponse, for claims (namespace, uid, name)."""
        m = kubelet_api.messages(self.version)
        reply = _call(self._channel,
                      kubelet_api.method_path(self.version, "NodePrepareResources"),
                      m["NodePrepareResourcesRequest"](claims=self._claims(claims)),
                      m["NodePrepareResourcesResponse"])
        return dict(reply.claims)

    def unprepare(self, *claims: tuple[str, str, str]) -> dict:
        """claim UID -> its error ("" for none)."""
        m = kubelet_api.messages(self.version)
        reply = _call(self._channel,
                      kubelet_api.method_path(self.version, "NodeUnprepareResources"),
                      m["NodeUnprepareResourcesRequest"](claims=self._claims(claims)),
                      m["NodeUnprepareResourcesResponse"])
        return {uid: answer.error for uid, answer in reply.claims.items()}

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
