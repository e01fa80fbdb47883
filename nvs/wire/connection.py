"""A blocking connection to the scheduler socket, for gemsharectl, the device plugin, tests and
benchmarks.

The scheduler itself uses Trio; this side only needs to send a frame and wait for one.

Connecting waits, within the connection's timeout, for a scheduler that cannot take it yet, as
libnvs does: while the listen queue is full (another user connecting in a loop) the connect
waits in the kernel's queue for room, and it is tried again after EAGAIN (the wait ran out
with no room) or ECONNREFUSED (the socket file is there but nobody listens yet: a scheduler
restarting). A socket file that is not there at all fails at once: no scheduler.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from pathlib import Path

from .. import protocol

DEFAULT_SOCKET = "/var/run/gemshare/scheduler.sock"
# Pauses between connection attempts, doubling up to the last, within the timeout.
RETRY_FIRST_S = 0.005
RETRY_MAX_S = 0.1
RETRIED = (errno.EAGAIN, errno.ECONNREFUSED)


def socket_path(explicit: str | os.PathLike | None = None) -> Path:
    """The socket to use: the explicit one, else GEMSHARE_SOCKET, else the default."""
    return Path(explicit or os.environ.get("GEMSHARE_SOCKET") or DEFAULT_SOCKET)


class SchedulerUnavailable(Exception):
    """No scheduler answers on the socket; the message says which path and what to do."""


class RefusedByScheduler(SchedulerUnavailable):
    """The scheduler answered with ERROR: `code` is its ErrorCode (PERMISSION: this process
    may not ask, from where it is), `text` its words."""

    def __init__(self, code: int, text: str):
        super().__init__(f"the scheduler refused the request: {text}")
        self.code = code
        self.text = text


class Connection:
    def __init__(self, path: str | os.PathLike, timeout: float = 5.0):
        self.path = Path(path)
        self.timeout = timeout
        self._decoder = protocol.FrameDecoder()
        self._seq = 0
        self._sock = self._connect(time.monotonic() + timeout)
        self._sock.settimeout(timeout)

    def _connect(self, deadline: float) -> socket.socket:
        pause = RETRY_FIRST_S
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                # Blocking, so that a full queue is waited on in the kernel, in turn with the
                # others waiting there, for at most what is left of the timeout.
                left = max(0.001, deadline - time.monotonic())
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(left))
                sock.connect(str(self.path))
                return sock
            except OSError as exc:
                sock.close()
                if exc.errno not in RETRIED or time.monotonic() + pause > deadline:
                    raise SchedulerUnavailable(self._explain(exc)) from None
            time.sleep(pause)
            pause = min(2 * pause, RETRY_MAX_S)

    def _explain(self, exc: OSError) -> str:
        where = f"gemshare-scheduler socket {self.path}"
        if exc.errno in (errno.ENOENT, errno.ECONNREFUSED):
            return (f"no scheduler is listening on {where}: start it with "
                    f"'sudo gemshare-scheduler' or point GEMSHARE_SOCKET/--socket at the right path")
        if exc.errno == errno.EACCES:
            return f"permission denied opening {where}: check the permissions of its directory"
        if exc.errno == errno.EAGAIN:
            return (f"the {where} took no new connection within {self.timeout:g} s (its queue "
                    "of connections stayed full); try again, or with a longer timeout")
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
                raise RefusedByScheduler(message.code, message.text)
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


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    return struct.pack("ll", whole, int((seconds - whole) * 1_000_000))
