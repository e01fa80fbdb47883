"""A scheduler stand-in that does only what the test says, for exact control of the frames a
client gets (DROP_LOCK with a byte count, EVICT, IDLE_HINT, grant flags) and of when it gets them.

It speaks the real protocol (`gemshare_nvs.protocol`) on a Unix socket: it answers REGISTER with
REGISTERED (mode `on`) by itself, after `registration_delay` seconds and preceded by LIMITS when
`memory_limit` is set (with `budget_used`) and by `mps` (an MPS frame) when that is, answers a
view-only registration (REG_VIEW_ONLY, a program that only asks NVML) the same way, records
every frame a client
sends with the CLOCK_MONOTONIC time it arrived (the clock of the fake driver's log), and sends
whatever the test asks. Clients are known by their pid (SO_PEERCRED).
"""

from __future__ import annotations

import selectors
import socket
import struct
import threading
import time
from pathlib import Path

from gemshare_nvs import protocol as p

from libnvs_programs import Program, Result, wait_file

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
        self._grants: dict[int, int] = {}  # pid -> grants sent
        self._stopping = False
        # How registrations are answered: the memory limit sent before REGISTERED (None: no
        # LIMITS) and what the others of its budget hold, the MPS frame sent before it (None:
        # none), and how long the answer takes.
        self.memory_limit: int | None = None
        self.budget_used = 0
        self.mps: p.Mps | None = None
        self.registration_delay = 0.0
        self._thread = threading.Thread(target=self._serve, name="scripted-scheduler",
                                        daemon=True)
        self._thread.start()

    def send(self, pid: int, message) -> None:
        self.wait_registered(pid)
        with self._changed:
            connection = self._connections[pid]
        connection.sendall(p.encode(message))

    def grant(self, pid: int, *, others_ran: bool = False, after_wait: bool = False) -> None:
        flags = (p.GRANT_OTHERS_RAN if others_ran else 0) | \
            (p.GRANT_AFTER_WAIT if after_wait else 0)
        self.send(pid, p.LockGranted(0, flags, TQ_SECONDS * 1000))
        self._grants[pid] = self._grants.get(pid, 0) + 1

    def grant_when_asked(self, pid: int, **flags) -> None:
        """Grants the lock once the client asked for it again (each grant answers one request)."""
        self.wait_for(pid, p.RequestLock, count=self._grants.get(pid, 0) + 1)
        self.grant(pid, **flags)

    def turn(self, program: Program, ran: Path, **flags) -> None:
        """Grants `program` the lock once it asks, and waits until it touched `ran`."""
        self.grant_when_asked(program.pid, **flags)
        wait_file(ran)

    def last_turn(self, program: Program, go: Path, **flags) -> Result:
        """Lets the program go on (touching `go`), grants it the lock once it asks again, and
        returns its result, which must be a success."""
        go.touch()
        self.grant_when_asked(program.pid, **flags)
        result = program.wait()
        assert result.returncode == 0, result.describe()
        return result

    def drop(self, pid: int, evict_bytes: int = 0) -> None:
        self.send(pid, p.DropLock(0, 0, evict_bytes))

    def evict(self, pid: int, size: int) -> None:
        self.send(pid, p.Evict(0, 0, size))

    def limit(self, pid: int, memory_limit: int, budget_used: int = 0) -> None:
        """Sends LIMITS and returns once the client has handled it: it handles frames in order,
        so a MOVED that answers an EVICT of nothing sent behind it means it has."""
        answered = len(self.moved(pid, done=True))
        self.send(pid, p.Limits(memory_limit, budget_used))
        self.evict(pid, 0)
        self.wait_moved_done(pid, answered + 1)

    def moved(self, pid: int, done: bool | None = None) -> list[tuple[int, p.Moved]]:
        """(arrival ns, MOVED) from the client; only those with (or without) MOVED_DONE when
        `done` says so."""
        return [(ns, m) for ns, m in self.received(pid, p.Moved)
                if done is None or bool(m.flags & p.MOVED_DONE) == done]

    def wait_moved_done(self, pid: int, count: int = 1) -> p.Moved:
        """The `count`th MOVED with MOVED_DONE from the client, once it arrived."""
        deadline = time.monotonic() + TIMEOUT
        while len(done := self.moved(pid, done=True)) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for MOVED_DONE #{count} from pid {pid}")
            self.wait_for(pid, p.Moved, count=len(self.received(pid, p.Moved)) + 1,
                          timeout=max(deadline - time.monotonic(), 0.01))
        return done[count - 1][1]

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
        """Stops serving and closes every connection and the socket; again: nothing more."""
        with self._changed:
            self._stopping = True
        self._thread.join(TIMEOUT)
        if self._selector.get_map() is None:
            return
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
            time.sleep(self.registration_delay)
            answer = [p.Limits(self.memory_limit, self.budget_used)] \
                if self.memory_limit is not None else []
            answer += [self.mps] if self.mps is not None else []
            try:
                connection.sendall(b"".join(map(p.encode, [*answer, p.Registered(
                    pid, p.Mode.ON, TQ_SECONDS)])))
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting and left
        with self._changed:
            self._received.append((arrived, pid, message))
            self._changed.notify_all()
