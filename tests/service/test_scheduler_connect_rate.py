"""A user who connects faster than its share of new connections (connect_rate.py) has the
excess closed as it is accepted, with one ERROR frame, while root and other users are served;
the listen queue is as long as the system allows."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from privileges import connected_as, require_root

from gemshare_nvs import protocol as p
from gemshare_nvs.service.connect_rate import MIN_BURST, TOLD, ConnectRate
from gemshare_nvs.wire.listener import backlog, open_listener

NOBODY = 65534
PER_USER = 32  # --max-clients-per-user: a burst of twice that, 64 connections at once
FLOOD = 100
READ_WAIT_S = 10.0  # only catches hangs


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_each_user_has_a_burst_and_then_a_rate():
    clock = Clock()
    rate = ConnectRate(100, rate=10.0, clock=clock)
    assert [rate.admit(1000) for _ in range(101)] == [True] * 100 + [False]
    assert rate.admit(1001)  # another user has a budget of its own
    clock.now = 0.5  # five more
    assert [rate.admit(1000) for _ in range(6)] == [True] * 5 + [False]
    assert all(rate.admit(0) for _ in range(1000))  # root is never closed
    assert rate.first_closed(1000) and not rate.first_closed(1000)
    assert rate.report() == {1000: 2}
    assert rate.report() == {}  # counted once
    clock.now = 100.0  # whole again: forgotten, and told again if it comes back
    rate.report()
    assert [rate.admit(1000) for _ in range(101)][-1] is False
    assert rate.first_closed(1000)


def test_the_first_closed_since_a_report_are_told_why_and_the_rest_closed_without_a_word():
    rate = ConnectRate(1, rate=0.0, clock=Clock())
    assert all(rate.admit(1000) for _ in range(rate.burst))
    told = []
    for _ in range(TOLD + 5):
        assert not rate.admit(1000)
        told.append(rate.told(1000))
    assert told == [True] * TOLD + [False] * 5
    rate.report()
    assert not rate.admit(1000) and rate.told(1000)


def test_the_burst_covers_every_client_one_user_may_have_and_its_unregistered_ones():
    assert ConnectRate.for_clients_per_user(256).burst == 512
    assert ConnectRate.for_clients_per_user(1).burst == MIN_BURST


def test_the_listen_queue_is_as_long_as_the_system_allows(short_tmp_dirs):
    limit = int(Path("/proc/sys/net/core/somaxconn").read_text())
    assert backlog() == limit
    listening = open_listener(short_tmp_dirs() / "scheduler.sock")
    made = []
    try:  # nothing accepts: the queue alone takes them, past the 128 it once had
        for _ in range(min(limit, 1000)):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            made.append(sock)
            sock.connect(str(listening.path))
    finally:
        for sock in made:
            sock.close()
        listening.close()


def closed_frames(sock: socket.socket, decoder: p.FrameDecoder) -> list | None:
    """The frames the scheduler sent on `sock` before closing it; None while it is open (what
    came so far waits in `decoder`, which the next call takes on)."""
    try:
        while data := sock.recv(65536, socket.MSG_DONTWAIT):
            decoder.feed(data)
    except BlockingIOError:
        return None
    except ConnectionResetError:
        pass
    frames = []
    while (item := decoder.next()) is not None:
        frames.append(item[0])
    return frames


def served(scheduler) -> int:
    """Connections the scheduler serves, besides the one asking."""
    with scheduler.connect() as conn:
        return conn.request({"op": "status"})["status"]["connections"] - 1


def test_connections_past_a_users_share_are_closed_at_once_and_said_once(scheduler_factory):
    require_root()
    scheduler = scheduler_factory(max_clients_per_user=PER_USER)
    socks = connected_as(NOBODY, NOBODY, str(scheduler.socket), FLOOD)
    try:
        # Until every one is either served (waiting for its first frame) or closed.
        deadline = time.monotonic() + READ_WAIT_S
        outcomes: list = [None] * FLOOD
        decoders = [p.FrameDecoder() for _ in socks]
        while True:
            outcomes = [closed_frames(sock, decoder) if frames is None else frames
                        for sock, decoder, frames in zip(socks, decoders, outcomes)]
            closed = [frames for frames in outcomes if frames is not None]
            if len(closed) + served(scheduler) == FLOOD or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        for sock in socks:
            sock.close()
    # Each closed one had one ERROR. The first 64 passed the rate (a few more may, as the
    # budget refills while they are taken): 32 are served, the others refused as more
    # unregistered connections than one user may have; the rest were closed over the rate.
    for frames in closed:
        assert len(frames) == 1 and frames[0].code == p.ErrorCode.TOO_MANY_CLIENTS, frames
    over_rate = [frames for frames in closed if "opens connections faster than" in
                 frames[0].text]
    assert 0 < len(over_rate) <= FLOOD - 2 * PER_USER, len(over_rate)
    # Root meanwhile: served as ever.
    for _ in range(FLOOD):
        with scheduler.connect() as conn:
            assert conn.request({"op": "status"})["ok"] is True
    log = scheduler.log()
    assert log.count(f"uid {NOBODY} opens connections faster than 64 at once, then 50 a "
                     "second") == 1, log
    assert scheduler.stop() == 0
    assert f"closed {len(over_rate)} more connections of uid {NOBODY} as they came" in \
        scheduler.log()
