"""A scheduler stand-in that does only what the test says, for messages the real scheduler does
not send yet (DROP_LOCK with DROP_EVICT) or not at a moment a test can choose.

It speaks the real protocol (`gemshare_nvs.protocol`) on a Unix socket: it answers REGISTER with
REGISTERED (mode `on`) by itself, records every frame a client sends with the CLOCK_MONOTONIC time
it arrived (the clock of the fake driver's log), and sends whatever the test asks. Clients are
known by their pid (SO_PEERCRED).
"""

from __future__ import annotations

import selectors
import socket
import struct
import threading
import time
from pathlib import Path

from gemshare_nvs import protocol as p

TIMEOUT = 30.0
TQ_SECONDS = 30


class ScriptedScheduler:
    def __init__(self, directory: Path):
        self.socket = directory / "scripted.sock"
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.socket))
        self._listener.listen(16)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._changed = threading.Condition()
        self._connections: dict[int, socket.socket] = {}  # pid -> connection
        self._received: list[tuple[int, int, object]] = []  # (ns, pid, message)
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name="scripted-scheduler",
                                        daemon=True)
        self._thread.start()

    def send(self, pid: int, message) -> None:
        self.wait_registered(pid)
        with self._changed:
            connection = self._connections[pid]
        connection.sendall(p.encode(message))

    def grant(self, pid: int, after_wait: bool) -> None:
        self.send(pid, p.LockGranted(0, p.GRANT_AFTER_WAIT if after_wait else 0,
                                     TQ_SECONDS * 1000))

    def received(self, pid: int, kind: type) -> list[tuple[int, object]]:
        """(arrival ns, message) of every `kind` message from the client with this pid."""
        with self._changed:
            return [(ns, m) for ns, who, m in self._received if who == pid and isinstance(m, kind)]

    def wait_for(self, pid: int, kind: type, count: int = 1,
                 timeout: float = TIMEOUT) -> list[tuple[int, object]]:
        """Waits until the client sent `count` messages of `kind`, and returns them all."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(found := self.received(pid, kind)) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout} s waiting for {count} "
                                         f"{kind.__name__} from pid {pid}; got {len(found)}")
                self._changed.wait(left)
        return found

    def wait_registered(self, pid: int) -> None:
        self.wait_for(pid, p.Register)

    def close(self) -> None:
        with self._changed:
            self._stopping = True
        self._thread.join(TIMEOUT)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()
        self._selector.close()

    def _serve(self) -> None:
        decoders: dict[socket.socket, tuple[int, p.FrameDecoder]] = {}
        while True:
            with self._changed:
                if self._stopping:
                    return
            for key, _ in self._selector.select(0.05):
                if key.fileobj is self._listener:
                    connection, _ = self._listener.accept()
                    pid, _, _ = struct.unpack(
                        "3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
                    decoders[connection] = (pid, p.FrameDecoder())
                    self._selector.register(connection, selectors.EVENT_READ)
                    continue
                connection = key.fileobj
                pid, decoder = decoders[connection]
                data = connection.recv(65536)
                if not data:  # the client exited
                    self._selector.unregister(connection)
                    connection.close()
                    continue
                decoder.feed(data)
                while (frame := decoder.next()) is not None:
                    self._record(pid, connection, frame[0])

    def _record(self, pid: int, connection: socket.socket, message) -> None:
        arrived = time.monotonic_ns()
        if isinstance(message, p.Register):
            with self._changed:
                self._connections[pid] = connection
            connection.sendall(p.encode(p.Registered(pid, p.Mode.ON, TQ_SECONDS)))
        with self._changed:
            self._received.append((arrived, pid, message))
            self._changed.notify_all()
