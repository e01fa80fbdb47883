"""The plugin's gRPC server on its own Unix socket in the kubelet's device-plugin directory."""

from __future__ import annotations

import os
from concurrent import futures

import grpc

from .service import MAX_STREAMS, DevicePluginService

STOP_GRACE_S = 1.0


def identity(path: str) -> tuple[int, int, int] | None:
    """What tells one file at `path` from another made there later; None when there is none."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino, info.st_ctime_ns


class ServeError(Exception):
    pass


class PluginServer:
    """One serving of the DevicePlugin service; a restart makes a new one."""

    def __init__(self, path: str, service: DevicePluginService):
        self.path = path
        self.service = service
        self.identity: tuple | None = None
        # Every stream holds a worker thread; the rest are for the short calls.
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=MAX_STREAMS + 8))
        self._server.add_generic_rpc_handlers((service.handler(),))

    def start(self) -> None:
        directory = os.path.dirname(self.path)
        # Checked here so that gRPC is not asked to bind where it cannot: it logs each failure.
        if not os.path.isdir(directory):
            raise ServeError(f"the directory {directory} does not exist (the kubelet makes it; "
                             f"is --kubelet-socket-dir its device-plugins directory?)")
        if not os.access(directory, os.W_OK | os.X_OK):
            raise ServeError(f"this user may not make sockets in {directory} (run as root)")
        try:
            os.unlink(self.path)  # a socket left by an earlier run of ours
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise ServeError(f"cannot remove the old socket {self.path}: {exc}") from None
        try:
            port = self._server.add_insecure_port(f"unix://{self.path}")
        except RuntimeError as exc:
            port = 0
            detail = f": {exc}"
        else:
            detail = ""
        if not port:
            raise ServeError(f"cannot listen on {self.path}{detail}")
        self._server.start()
        self.identity = identity(self.path)

    def stop(self) -> None:
        self.service.stop()
        self._server.stop(STOP_GRACE_S).wait(STOP_GRACE_S + 1)
        if self.identity is not None and identity(self.path) == self.identity:
            try:
                os.unlink(self.path)
            except OSError:
                pass
