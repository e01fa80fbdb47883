"""Control connections are shared (fair_slots.py): a user outside the control group may hold an
eighth of them, such users together all but a quarter, and root and the control group always
find room; a control connection that asks nothing for a while is closed."""

from __future__ import annotations

import grp
import logging
import socket
import time

from privileges import connected_as, require_root
from trio_peer import Peer

from gemshare_nvs import protocol as p
from gemshare_nvs.config.settings import DEFAULT_MAX_CONTROL
from gemshare_nvs.service.fair_slots import control_room
from gemshare_nvs.wire.connection import Connection

NOBODY = 65534
STRANGERS = 60001  # uids with no account and no group: users outside the control group
TIMEOUT = 15.0  # only catches hangs


def reply_to(sock: socket.socket, body: dict, seq: int):
    """Send one control request on a connection another user opened; the answer, a
    ControlReply or the Error that refused it."""
    sock.settimeout(TIMEOUT)
    sock.sendall(p.encode(p.Control(body), seq))
    decoder = p.FrameDecoder()
    while (item := decoder.next()) is None:
        data = sock.recv(65536)
        assert data, "closed without an answer"
        decoder.feed(data)
    return item[0]


def ask_status(sock: socket.socket):
    return reply_to(sock, {"op": "status"}, 1)


def may_still_control(path: str, uid: int, gid: int) -> None:
    """status and set are answered on a new connection of uid/gid."""
    (sock,) = connected_as(uid, gid, path, 1)
    with sock:
        assert ask_status(sock).body["ok"] is True
        assert reply_to(sock, {"op": "set", "tq": 13}, 2).body["ok"] is True


def root_may_still_control(path: str) -> None:
    with Connection(path) as conn:
        assert conn.request({"op": "status"})["ok"] is True
        assert conn.request({"op": "set", "tq": 12})["ok"] is True


def test_one_user_holding_every_control_connection_leaves_root_room(scheduler_factory):
    require_root()
    running = scheduler_factory()
    path = str(running.socket)
    per_user, _ = control_room(DEFAULT_MAX_CONTROL)
    held = connected_as(NOBODY, NOBODY, path, DEFAULT_MAX_CONTROL)
    answers = [ask_status(sock) for sock in held]
    granted = [a for a in answers if isinstance(a, p.ControlReply)]
    refused = [a for a in answers if isinstance(a, p.Error)]
    assert len(granted) == per_user and len(refused) == DEFAULT_MAX_CONTROL - per_user
    assert refused[0].code == p.ErrorCode.TOO_MANY_CLIENTS
    assert f"uid {NOBODY} already has {per_user} control connections" in refused[0].text
    root_may_still_control(path)  # the held ones stay open meanwhile
    granted_socks = [sock for sock, a in zip(held, answers) if isinstance(a, p.ControlReply)]
    granted_socks[0].close()  # a slot given back serves the same user again
    deadline = time.monotonic() + TIMEOUT
    while not isinstance(ask_status(connected_as(NOBODY, NOBODY, path, 1)[0]), p.ControlReply):
        assert time.monotonic() < deadline, "the closed connection's slot never came back"
        time.sleep(0.05)  # until the scheduler has seen the close
    for sock in held:
        sock.close()


def test_users_together_leave_a_quarter_to_root_and_the_control_group(scheduler_factory):
    require_root()
    control_group = grp.getgrgid(NOBODY)
    running = scheduler_factory(control_group=control_group.gr_name)
    path = str(running.socket)
    per_user, together = control_room(DEFAULT_MAX_CONTROL)
    held = []
    for n in range(together // per_user):
        held += connected_as(STRANGERS + n, STRANGERS + n, path, per_user)
    assert all(isinstance(ask_status(sock), p.ControlReply) for sock in held)
    (late,) = connected_as(STRANGERS + 99, STRANGERS + 99, path, 1)
    error = ask_status(late)
    assert isinstance(error, p.Error) and "all they may have together" in error.text
    root_may_still_control(path)
    may_still_control(path, STRANGERS + 100, control_group.gr_gid)
    for sock in [*held, late]:
        sock.close()


async def test_a_control_connection_that_asks_nothing_more_is_closed(inprocess_scheduler,
                                                                      caplog):
    caplog.set_level(logging.INFO, "gemshare.scheduler")
    running = await inprocess_scheduler(control_idle_seconds=0.2)
    client = await Peer.connect(running.socket)
    await client.register("quiet client")  # clients may be idle for as long as they like
    idle = await Peer.connect(running.socket)
    assert (await idle.control({"op": "status"}))["ok"] is True
    assert await idle.closed_after(TIMEOUT) == []
    assert "no request within 0.2 s, so that it holds no control slot" in caplog.text
    await client.send(p.RequestLock(0))
    assert isinstance(await client.recv(), p.LockGranted)
