"""The log as an operator reads it: one peer's repeated warnings are rate-limited, and under
systemd each line carries its syslog priority for `journalctl -p`."""

import logging
import os
import re
import socket

import pytest
from privileges import connected_as, require_root

from gemshare_nvs.service import log_rate

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


def test_one_peers_repeated_warnings_are_limited_and_counted(scheduler_factory):
    require_root()
    running = scheduler_factory()
    bursts = log_rate.BURST + 15
    for _ in range(bursts):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(running.socket))
            send_garbage(sock)
    assert closing_lines(running.log(), 0) == log_rate.BURST
    # Another peer's warnings are its own: not held back by the first one's.
    (other,) = connected_as(NOBODY, NOBODY, str(running.socket), 1)
    send_garbage(other)
    assert closing_lines(running.log(), NOBODY) == 1
    assert running.stop() == 0
    assert f"suppressed 15 similar lines from uid 0 in {log_rate.WINDOW_SECONDS:g} s" \
        in running.log()


def test_window_over_lets_lines_through_again_after_the_count():
    clock = [0.0]
    limit = log_rate.PeerRateLimit(burst=2, window=10, clock=lambda: clock[0])

    def record(peer="uid 5", level=logging.WARNING):
        made = logging.LogRecord("gemshare.scheduler", level, __file__, 1, "x", (), None)
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
        assert limit.filter(record(level=logging.INFO))  # only warnings are limited
        assert limit.filter(record(peer="uid 6"))
        clock[0] = 10.0
        assert limit.filter(record())
        assert seen == ["suppressed 2 similar lines from uid 5 in 10 s"]
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
