"""The blocking client (nvs/wire/connection.py: gemsharectl, the device plugin, tests) connects to
a scheduler that cannot take it yet, within its timeout: it waits out a full listen queue and a
socket that nobody listens on yet, and fails at once only where no socket file is."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from gemshare_nvs.wire.connection import Connection, SchedulerUnavailable

LATER_S = 0.3  # when the stand-in scheduler starts taking connections
TIMEOUT_S = 20.0  # far longer: only a client that gives up early fails


def bound(path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    return sock


def later(action) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(LATER_S), action()))
    thread.start()
    return thread


@pytest.fixture
def full(tmp_path):
    """A socket whose listen queue (listen(0): one) is full, nobody accepting: (its listener,
    its path, the connections that fill it)."""
    path = tmp_path / "s.sock"
    listener = bound(path)
    listener.listen(0)
    queued = []
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(str(path))
        except BlockingIOError:
            sock.close()
            break
        queued.append(sock)
    yield listener, path, queued
    for sock in queued:
        sock.close()
    listener.close()


def test_a_socket_nobody_listens_on_yet_is_tried_again(tmp_path):
    path = tmp_path / "s.sock"
    listener = bound(path)  # bound, not listening: ECONNREFUSED, as while a scheduler starts
    starting = later(lambda: listener.listen(8))
    try:
        with Connection(path, timeout=TIMEOUT_S):
            accepted, _ = listener.accept()
            accepted.close()
    finally:
        starting.join()
        listener.close()


def test_a_full_queue_is_waited_on_until_there_is_room(full):
    listener, path, queued = full
    emptied = later(lambda: [listener.accept()[0].close() for _ in queued])
    try:
        with Connection(path, timeout=TIMEOUT_S):
            pass
    finally:
        emptied.join()


def test_a_queue_that_stays_full_fails_after_the_timeout_saying_so(full):
    _, path, _ = full
    with pytest.raises(SchedulerUnavailable, match="took no new connection within 0.5 s"):
        Connection(path, timeout=0.5)


def test_no_socket_file_fails_at_once(tmp_path):
    with pytest.raises(SchedulerUnavailable, match="no scheduler is listening"):
        Connection(tmp_path / "none.sock", timeout=TIMEOUT_S)
