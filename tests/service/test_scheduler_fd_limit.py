"""A low file descriptor limit: the scheduler brings its connection caps within it, says so, and
refuses the connections past them cleanly instead of failing accept() in a loop."""

import select
import socket
import sys
import time

from gemshare_nvs import protocol as p

LIMIT = 200
# The scheduler under a hard limit of LIMIT descriptors, as a unit's LimitNOFILE=200 would set.
LIMITED = ("import os, resource, sys; "
           f"resource.setrlimit(resource.RLIMIT_NOFILE, ({LIMIT}, {LIMIT})); "
           "os.execv(sys.argv[1], sys.argv[1:])")
LOW_SOFT = ("import os, resource, sys; "
            "resource.setrlimit(resource.RLIMIT_NOFILE, (100, resource.getrlimit("
            "resource.RLIMIT_NOFILE)[1])); os.execv(sys.argv[1], sys.argv[1:])")
ANSWER_TIMEOUT = 15.0  # only catches hangs


def status(running) -> dict:
    with running.connect() as control:
        return control.request({"op": "status"})["status"]


def test_caps_are_clamped_to_the_limit_and_logged(scheduler_factory):
    running = scheduler_factory(wrapper=[sys.executable, "-c", LIMITED])
    log = running.log()
    assert (f"the file descriptor limit ({LIMIT}) allows 120 clients, 8 control connections and "
            "8 view-only registrations, not the 1024, 64 and 256 asked for") in log
    assert "max 120 clients (30 per user), 8 control connections, 8 view-only registrations" \
        in log
    assert status(running)["max_clients"] == 120
    assert status(running)["view_only"]["max"] == 8


def test_soft_limit_is_raised_to_the_hard_one(scheduler_factory):
    running = scheduler_factory(wrapper=[sys.executable, "-c", LOW_SOFT])
    with open(f"/proc/{running.process.pid}/limits") as limits:
        line = next(line for line in limits if line.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    assert soft == hard
    assert "file descriptor limit" not in running.log()  # room enough once raised


def test_connections_past_the_caps_are_refused_not_left_hanging(scheduler_factory):
    running = scheduler_factory(wrapper=[sys.executable, "-c", LIMITED])
    socks = []
    try:
        for _ in range(LIMIT + 50):  # more than the scheduler could open descriptors for
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(str(running.socket))
            socks.append(sock)
        # Each connection past the 136 it serves is answered (an ERROR, or closed when many are
        # being refused at once); those it serves wait for their first frame.
        answered = set()
        deadline = time.monotonic() + ANSWER_TIMEOUT
        while len(answered) < len(socks) - 136 and time.monotonic() < deadline:
            ready, _, _ = select.select([s for s in socks if s not in answered], [], [], 0.1)
            answered.update(ready)
        assert len(answered) == len(socks) - 136
        errors = 0
        for sock in answered:
            data = sock.recv(65536)
            if data:
                decoder = p.FrameDecoder()
                decoder.feed(data)
                message, _ = decoder.next()
                assert isinstance(message, p.Error), message
                assert message.code == p.ErrorCode.TOO_MANY_CLIENTS
                assert "already has 136 connections" in message.text
                errors += 1
        assert errors > 0
    finally:
        for sock in socks:
            sock.close()
    # Still serving, and it never ran out of descriptors.
    deadline = time.monotonic() + ANSWER_TIMEOUT
    while True:
        try:
            assert status(running)["tq"] == 30
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert "Too many open files" not in running.log()
    assert running.process.poll() is None
