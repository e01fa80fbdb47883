"""Blocking gRPC calls to a daemon of the node over its Unix socket, each within a deadline.

gRPC and protobuf are optional: they come with the extra `gemshare[kubernetes]`, and are imported
only when a socket is to be used, so that the scheduler runs without them outside Kubernetes.
Errors come out as NodeApiError, so that callers need not import gRPC.
"""

from __future__ import annotations

INSTALL = "pip install 'gemshare[kubernetes]'"
# A List of every pod on a big node may be large; the kubelet's own limit is 16 MiB.
MAX_REPLY_BYTES = 16 << 20
# A daemon that restarts is dialled again within seconds, not gRPC's default two minutes.
RECONNECT_BACKOFF_MS = (500, 5000)


class GrpcMissing(Exception):
    """gRPC or protobuf is not installed."""


class NodeApiError(Exception):
    """A call failed: `code` is gRPC's status name (UNAVAILABLE, DEADLINE_EXCEEDED, ...)."""

    def __init__(self, code: str, details: str):
        super().__init__(f"{code}: {details}" if details else code)
        self.code = code
        self.details = details


def require_grpc(needed_by: str = "reading the node's Kubernetes sockets"):
    """The grpc module, with protobuf beside it; GrpcMissing saying what `needed_by` needs and
    what to install."""
    try:
        import google.protobuf  # noqa: F401
        import grpc
    except ImportError as exc:
        raise GrpcMissing(f"{needed_by} needs gRPC and protobuf, which are not installed "
                          f"({exc}); {INSTALL}") from None
    return grpc


class UnixChannel:
    """One channel to the socket at `path`, dialled on the first call and again after a
    failure; every call gives up after `timeout_s`."""

    def __init__(self, path: str, timeout_s: float):
        grpc = require_grpc()
        self._rpc_error = grpc.RpcError
        self.path = path
        self.timeout_s = timeout_s
        self._channel = grpc.insecure_channel(f"unix://{path}", options=[
            ("grpc.max_receive_message_length", MAX_REPLY_BYTES),
            ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[0]),
            ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[1]),
        ])

    def call(self, method: str, request, response_type):
        """The reply to `request` at `method` ("/package.Service/Method"); NodeApiError."""
        stub = self._channel.unary_unary(method, request_serializer=type(request).SerializeToString,
                                         response_deserializer=response_type.FromString)
        try:
            return stub(request, timeout=self.timeout_s)
        except self._rpc_error as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            raise NodeApiError(code.name if code is not None else "UNKNOWN",
                               details or "") from None

    def close(self) -> None:
        self._channel.close()
