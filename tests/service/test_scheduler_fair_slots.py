"""A per-user cap on clients: one user at its cap cannot keep another user, or root, from
registering; the refused connection is told why."""

import select
import socket
import time

import pytest
from privileges import connected_as, require_root

from gemshare_nvs import protocol as p

NOBODY = 65534
OTHER = 65533  # a second unprivileged uid; it needs no entry in the user database
REPLY_TIMEOUT = 10.0


@pytest.fixture(autouse=True)
def needs_root():
    require_root()


def register(sock: socket.socket, name: str):
    """Send REGISTER on `sock`; the first message that comes back (REGISTERED or ERROR)."""
    sock.settimeout(REPLY_TIMEOUT)
    sock.sendall(p.encode(p.Register(0, 0, name), 1))
    decoder = p.FrameDecoder()
    while True:
        data = sock.recv(65536)
        assert data, "the scheduler closed the connection without a reply"
        decoder.feed(data)
        item = decoder.next()
        while item is not None:
            message, _ = item
            if isinstance(message, (p.Registered, p.Error)):
                return message
            item = decoder.next()


def registered_clients(scheduler) -> list:
    with scheduler.connect() as control:
        return control.request({"op": "status"})["status"]["clients"]


def connections(scheduler) -> int:
    """Connections open, the one asking included."""
    with scheduler.connect() as control:
        return control.request({"op": "status"})["status"]["connections"]


def test_user_at_its_cap_leaves_room_for_another_user_and_root(scheduler_factory):
    running = scheduler_factory(max_clients=8)  # a quarter of it: 2 per user
    path = str(running.socket)
    held = connected_as(NOBODY, NOBODY, path, 2)
    other = connected_as(OTHER, OTHER, path, 2)
    mine = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(3)]
    try:
        for sock in mine:
            sock.connect(path)
        assert all(isinstance(register(sock, "nobody"), p.Registered) for sock in held)
        held += connected_as(NOBODY, NOBODY, path, 1)
        refused = register(held[2], "nobody")
        assert isinstance(refused, p.Error) and refused.code == p.ErrorCode.TOO_MANY_CLIENTS
        assert "uid 65534" in refused.text and "--max-clients-per-user 2" in refused.text
        # The user at its cap keeps its two; another user, and root past 2, still get in.
        assert all(isinstance(register(sock, "other"), p.Registered) for sock in other)
        assert all(isinstance(register(sock, "root"), p.Registered) for sock in mine)
        uids = sorted(client["uid"] for client in registered_clients(running))
        assert uids == [0, 0, 0, OTHER, OTHER, NOBODY, NOBODY]
    finally:
        for sock in [*held, *other, *mine]:
            sock.close()
    assert "already has 2 clients, the most one user may have" in running.log()


def test_cap_is_an_option_and_freed_slots_are_reused(scheduler_factory):
    running = scheduler_factory(max_clients=100, max_clients_per_user=1)
    path = str(running.socket)
    (first,) = connected_as(NOBODY, NOBODY, path, 1)
    with first:
        assert isinstance(register(first, "one"), p.Registered)
        (second,) = connected_as(NOBODY, NOBODY, path, 1)
        with second:
            refused = register(second, "two")
    assert isinstance(refused, p.Error) and "--max-clients-per-user 1" in refused.text
    deadline = time.monotonic() + REPLY_TIMEOUT
    while connections(running) > 1:  # until both are gone, as far as the scheduler knows
        assert time.monotonic() < deadline
        time.sleep(0.05)
    (again,) = connected_as(NOBODY, NOBODY, path, 1)
    with again:  # the cap counts clients connected now, not ever
        assert isinstance(register(again, "three"), p.Registered)


def test_connections_that_never_register_are_capped_per_user_too(scheduler_factory):
    running = scheduler_factory(max_clients=8)
    path = str(running.socket)
    silent = connected_as(NOBODY, NOBODY, path, 3)  # past the 2 a user may have waiting
    try:
        # Which of the three is refused depends on the order they are served in.
        ready, _, _ = select.select(silent, [], [], REPLY_TIMEOUT)
        assert len(ready) == 1
        decoder = p.FrameDecoder()
        decoder.feed(ready[0].recv(65536))
        refused, _ = decoder.next()
        assert isinstance(refused, p.Error) and refused.code == p.ErrorCode.TOO_MANY_CLIENTS
        assert "have not registered" in refused.text
        (other,) = connected_as(OTHER, OTHER, path, 1)
        with other:
            assert isinstance(register(other, "other"), p.Registered)
    finally:
        for sock in silent:
            sock.close()
