"""Run a function as another user in a forked child, for permission tests.

The interpreter may live where other users cannot execute it (here under /root), so the child is
forked rather than exec'd: it drops its groups, gid and uid, runs the function and sends back a
JSON result through a pipe.
"""

from __future__ import annotations

import json
import os
import select
import time

import pytest

CHILD_TIMEOUT = 20.0  # only catches hangs


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("dropping to another uid needs root")


def run_as(uid: int, gid: int, function, *args, groups=()):
    """function(*args) as uid/gid with exactly `groups` as its supplementary groups (none by
    default, whatever the group database says); its JSON-able result."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            os.close(read_end)
            os.setgroups(list(groups))
            os.setgid(gid)
            os.setuid(uid)
            result = {"value": function(*args)}
        except BaseException as exc:  # reported to the parent, which fails the test
            result = {"error": f"{type(exc).__name__}: {exc}"}
        try:
            os.write(write_end, json.dumps(result).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    chunks = []
    deadline = time.monotonic() + CHILD_TIMEOUT
    try:
        while True:  # read as it comes, so a big result cannot block the child
            ready, _, _ = select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise AssertionError(f"child as uid {uid} did not finish in {CHILD_TIMEOUT} s")
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        if not chunks:
            os.kill(pid, 9)
        os.waitpid(pid, 0)
    outcome = json.loads(b"".join(chunks) or b'{"error": "child wrote nothing"}')
    if "error" in outcome:
        raise AssertionError(f"child as uid {uid} failed: {outcome['error']}")
    return outcome["value"]


def connected_as(uid: int, gid: int, path: str, count: int) -> list:
    """`count` sockets connected to `path` by a child running as uid/gid, handed back to this
    process: the scheduler sees that uid (SO_PEERCRED is taken at connect), while the test
    drives the conversation."""
    import socket

    parent_end, child_end = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            parent_end.close()
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            made = []
            for _ in range(count):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(path)
                made.append(sock)
            socket.send_fds(child_end, [b"x"], [sock.fileno() for sock in made])
            status = 0
        finally:
            os._exit(status)
    child_end.close()
    try:
        parent_end.settimeout(CHILD_TIMEOUT)
        _, fds, _, _ = socket.recv_fds(parent_end, 1, count)
    finally:
        parent_end.close()
        os.waitpid(pid, 0)
    assert len(fds) == count, f"child as uid {uid} connected {len(fds)} of {count} sockets"
    return [socket.socket(fileno=fd) for fd in fds]
