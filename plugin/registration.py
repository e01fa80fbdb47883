"""Registering with the kubelet: one Register call on its socket."""

from __future__ import annotations

import grpc

from . import api


class RegistrationFailed(Exception):
    pass


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
            raise RegistrationFailed(f"{exc.code().name}: {exc.details()}") from None
