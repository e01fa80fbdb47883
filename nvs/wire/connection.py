"""A blocking connection to the scheduler socket, for gemsharectl, tests and benchmarks.

The scheduler itself uses Trio; this side only needs to send a frame and wait for one.
"""

from __future__ import annotations

import errno
import os
import socket
import time
from pathlib import Path

from .. import protocol

DEFAULT_SOCKET = "/var/run/gemshare/scheduler.sock"


def socket_path(explicit: str | os.PathLike | None = None) -> Path:
    """The socket to use: the explicit one, else GEMSHARE_SOCKET, else the default."""
    return Path(explicit or os.environ.get("GEMSHARE_SOCKET") or DEFAULT_SOCKET)


class SchedulerUnavailable(Exception):
    """No scheduler answers on the socket; the message says which path and what to do."""


class Connection:
    def __init__(self, path: str | os.PathLike, timeout: float = 5.0):
        self.path = Path(path)
        self.timeout = timeout
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        self._decoder = protocol.FrameDecoder()
        self._seq = 0
        try:
            self._sock.connect(str(self.path))
        except OSError as exc:
            self._sock.close()
            raise SchedulerUnavailable(self._explain(exc)) from None

    def _explain(self, exc: OSError) -> str:
        where = f"gemshare-scheduler socket {self.path}"
        if exc.errno in (errno.ENOENT, errno.ECONNREFUSED):
            return (f"no scheduler is listening on {where}: start it with "
                    f"'sudo gemshare-scheduler' or point GEMSHARE_SOCKET/--socket at the right path")
        if exc.errno == errno.EACCES:
            return f"permission denied opening {where}: check the permissions of its directory"
        return f"cannot connect to {where}: {exc.strerror or exc}"

    def send(self, message) -> int:
        """Send one message; returns the sequence number it carried."""
        self._seq = (self._seq + 1) & protocol.MAX_SEQ
        self.send_raw(protocol.encode(message, self._seq))
        return self._seq

    def send_raw(self, data: bytes) -> None:
        self._sock.settimeout(self.timeout)  # recv may have left it at none
        self._sock.sendall(data)

    def recv(self, timeout: float | None = None):
        """The next (message, seq); raises SchedulerUnavailable if the scheduler hangs up."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while (item := self._decoder.next()) is None:
            # Past the deadline one last look, without waiting: an answer that came in time
            # counts even when this process was slow to get to it.
            self._sock.settimeout(max(0.0, deadline - time.monotonic()))
            try:
                data = self._sock.recv(65536)
            except (socket.timeout, BlockingIOError):
                raise TimeoutError(f"no answer from the scheduler on {self.path} in time") from None
            except ConnectionResetError:
                data = b""
            if not data:
                raise SchedulerUnavailable(f"the scheduler on {self.path} closed the connection")
            self._decoder.feed(data)
        return item

    def request(self, body: dict) -> dict:
        """One control request and its reply body."""
        seq = self.send(protocol.Control(body))
        while True:
            message, reply_seq = self.recv()
            if isinstance(message, protocol.Error):
                raise SchedulerUnavailable(f"the scheduler refused the request: {message.text}")
            if isinstance(message, protocol.ControlReply) and reply_seq == seq:
                return message.body

    def fileno(self) -> int:
        return self._sock.fileno()

    def close(self) -> None:
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
