"""The log as an operator reads it: the lines one user's doings cause are held to a budget,
and under systemd each line carries its syslog priority for `journalctl -p`."""

import logging
import os
import re
import socket
import time

import pytest
from privileges import require_root, run_as

from gemshare_nvs.service import log_rate
from gemshare_nvs.wire.connection import SchedulerUnavailable

NOBODY = 65534
GARBAGE = b"\0" * 16  # a header with a bad magic: the connection is closed with a warning
LOG_TIMEOUT = 15.0  # only catches hangs


def send_garbage(sock: socket.socket) -> None:
    with sock:
        sock.settimeout(LOG_TIMEOUT)
        sock.sendall(GARBAGE)
        while sock.recv(65536):  # until the scheduler has closed it, so it has logged it
            pass


def closing_lines(log: str, uid: int) -> int:
    return len(re.findall(rf"closing connection \d+ \(pid \d+, uid {uid}\)", log))


def half_frames(path: str, count: int) -> float:
    """`count` connections, each sending half a frame header and hanging up: what costs a user
    nothing and makes the scheduler write an INFO line each. Seconds it took."""
    started = time.monotonic()
    for _ in range(count):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(path)
            sock.sendall(b"GSHR")
    return time.monotonic() - started


def wait_for_no_connections(running) -> None:
    """Until the scheduler has served every connection but the one asking."""
    deadline = time.monotonic() + LOG_TIMEOUT
    while True:
        try:
            with running.connect() as control:
                if control.request({"op": "status"})["status"]["connections"] == 1:
                    return
        except SchedulerUnavailable:  # its queue of connections to accept is still full
            pass
        assert time.monotonic() < deadline, "connections still open"
        time.sleep(0.05)


def test_lines_one_user_causes_are_limited_at_any_level_and_counted(scheduler_factory):
    require_root()
    running = scheduler_factory()
    flood = log_rate.BURST + 200
    started = time.monotonic()
    run_as(NOBODY, NOBODY, half_frames, str(running.socket), flood)
    wait_for_no_connections(running)
    # Another user's lines are their own: not held back by the first one's.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(running.socket))
        send_garbage(sock)
    assert running.stop() == 0
    elapsed = time.monotonic() - started
    log = running.log()
    written = len(re.findall(rf"\(pid \d+, uid {NOBODY}\)", log))
    # Every connection was worth one line; past the burst, at most `rate` a second got through.
    assert written <= log_rate.BURST + log_rate.RATE * elapsed + 1, (written, elapsed)
    left_out = re.search(rf"suppressed (\d+) lines caused by uid {NOBODY} in the last", log)
    assert left_out is not None, log[-3000:]
    assert written + int(left_out[1]) == flood
    assert "closed by the peer inside a frame" in log
    assert closing_lines(log, 0) == 1


def test_a_budget_gives_a_burst_then_a_rate_and_counts_the_rest():
    clock = [0.0]
    limit = log_rate.PeerRateLimit(burst=2, rate=0.5, report_seconds=10, clock=lambda: clock[0])

    def record(peer="uid 5", level=logging.INFO):
        made = logging.LogRecord("gemshare.scheduler", level, __file__, 1, "x", (), None)
        if peer is not None:
            made.peer = peer
        return made

    seen = []

    class Keep(logging.Handler):
        def emit(self, rec):
            seen.append(rec.getMessage())

    logger = logging.getLogger("gemshare.scheduler")
    keep = Keep()
    logger.addHandler(keep)
    try:
        assert [limit.filter(record()) for _ in range(4)] == [True, True, False, False]
        assert not limit.filter(record(level=logging.WARNING))  # every level spends it
        assert limit.filter(record(peer="uid 6"))  # another peer has its own
        assert limit.filter(record(peer=None))  # a line no peer caused is never held back
        clock[0] = 2.0  # half a line a second: one more
        assert [limit.filter(record()) for _ in range(2)] == [True, False]
        limit.flush()
        assert seen == ["suppressed 4 lines caused by uid 5 in the last 2 s (past 2 at once "
                        "and 0.5 a second)"]
        clock[0] = 100.0
        limit.flush()  # nothing more left out: nothing said, and the whole budgets forgotten
        assert len(seen) == 1 and limit.filter(record()) and limit.filter(record())
    finally:
        logger.removeHandler(keep)


@pytest.mark.parametrize("matching", [True, False], ids=["journal", "elsewhere"])
def test_lines_carry_syslog_priorities_only_when_stderr_is_the_journal(scheduler_factory,
                                                                       short_tmp_dirs,
                                                                       matching):
    directory = short_tmp_dirs()
    log_file = directory / "scheduler.log"
    log_file.touch()  # the scheduler's stderr: the test's fixture reopens this very file
    info = os.stat(log_file)
    stream = f"{info.st_dev}:{info.st_ino}" if matching else f"{info.st_dev}:{info.st_ino + 1}"
    running = scheduler_factory(directory=directory, env={"JOURNAL_STREAM": stream})
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(running.socket))
        send_garbage(sock)
    lines = running.log().splitlines()
    listening = next(line for line in lines if "listening on" in line)
    closing = next(line for line in lines if "closing connection" in line)
    if matching:
        assert listening.startswith("<6>INFO listening on")
        assert closing.startswith("<4>WARNING closing connection")
        assert all(re.match(r"<[3467]>", line) for line in lines)
    else:
        assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} INFO listening on", listening)
        assert not any(line.startswith("<") for line in lines)
