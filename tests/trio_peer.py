"""An async peer of the scheduler for in-process tests: frames over a real Unix socket."""

from __future__ import annotations

import socket
import subprocess
import sys

import trio

from gemshare_nvs import protocol as p

RECV_TIMEOUT = 10.0  # only catches hangs
# Connects to argv[1] and hands the connected socket over the descriptor argv[2].
CONNECTING_CHILD = """
import socket, sys
channel = socket.socket(fileno=int(sys.argv[2]))
peer = socket.socket(socket.AF_UNIX)
peer.connect(sys.argv[1])
socket.send_fds(channel, [b"x"], [peer.fileno()])
"""


def _connected_by_child(path: str) -> tuple[socket.socket, int]:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        child = subprocess.Popen([sys.executable, "-c", CONNECTING_CHILD, path,
                                  str(theirs.fileno())], pass_fds=[theirs.fileno()])
        theirs.close()
        _, fds, _, _ = socket.recv_fds(ours, 1, 1)
        child.wait(RECV_TIMEOUT)
    return socket.socket(fileno=fds[0]), child.pid


class Peer:
    def __init__(self, stream: trio.SocketStream):
        self.stream = stream
        self.decoder = p.FrameDecoder()
        self.seq = 0
        self.hints: list[p.IdleHint] = []  # set aside by recv

    @classmethod
    async def connect(cls, path) -> "Peer":
        return cls(await trio.open_unix_socket(str(path)))

    @classmethod
    async def connect_as_another_process(cls, path) -> tuple["Peer", int]:
        """A connection made by a short-lived child process, so that the scheduler sees that
        child's pid (SO_PEERCRED is taken at connect()); and the pid."""
        sock, pid = await trio.to_thread.run_sync(_connected_by_child, str(path))
        return cls(trio.SocketStream(trio.socket.from_stdlib_socket(sock))), pid

    async def send(self, message) -> int:
        self.seq += 1
        await self.stream.send_all(p.encode(message, self.seq))
        return self.seq

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def recv(self, timeout: float = RECV_TIMEOUT):
        """The next message but IDLE_HINT (advice that changes no turn, kept in `hints`);
        EOFError when the scheduler closed the connection."""
        while isinstance(message := (await self.recv_with_seq(timeout))[0], p.IdleHint):
            self.hints.append(message)
        return message

    async def recv_with_seq(self, timeout: float = RECV_TIMEOUT):
        with trio.fail_after(timeout):
            while (item := self.decoder.next()) is None:
                try:
                    data = await self.stream.receive_some(65536)
                except trio.BrokenResourceError:
                    data = b""
                if not data:
                    raise EOFError("the scheduler closed the connection")
                self.decoder.feed(data)
        return item

    async def register(self, name: str = "peer", device: int = 0) -> p.Registered:
        await self.send(p.Register(device, 0, name))
        registered = await self.recv()
        assert isinstance(registered, p.Registered), registered
        return registered

    async def control(self, body: dict) -> dict:
        seq = await self.send(p.Control(body))
        reply, reply_seq = await self.recv_with_seq()
        assert isinstance(reply, p.ControlReply) and reply_seq == seq, (reply, reply_seq, seq)
        return reply.body

    async def closed_after(self, timeout: float = RECV_TIMEOUT) -> list:
        """Everything received until the scheduler closes the connection."""
        received = []
        with trio.fail_after(timeout):
            while True:
                try:
                    received.append(await self.recv(timeout))
                except EOFError:
                    return received

    async def aclose(self) -> None:
        await self.stream.aclose()
