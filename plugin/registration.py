"""Registering with the kubelet: one Register call on its socket."""

from __future__ import annotations

import grpc

from . import api

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
