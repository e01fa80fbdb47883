"""The log as an operator reads it: the lines one user's doings cause are held to a budget (root's
and the control group's to one ten times as large), a value with a newline in it stays on its
line, and under systemd each line carries its syslog priority for `journalctl -p`."""

import grp
import logging
import os
import re
import socket
import time

import pytest
from lock_client import cycles
from privileges import require_root, run_as

from gemshare_nvs import protocol as p
from gemshare_nvs.service import log_rate
from gemshare_nvs.service.journal import formatter
from gemshare_nvs.wire.connection import Connection, SchedulerUnavailable

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
    # Lines the user caused: its connections closed inside a frame, and those refused as more
    # unregistered connections than one user may have (the scheduler takes them faster than
    # it sees them end).
    written = len([line for line in log.splitlines() if f"uid {NOBODY}" in line and
                   "suppressed" not in line])
    # Every connection was worth one line; past the burst, at most `rate` a second got through.
    assert written <= log_rate.BURST + log_rate.RATE * elapsed + 1, (written, elapsed)
    left_out = re.search(rf"suppressed (\d+) lines caused by uid {NOBODY} in the last", log)
    assert left_out is not None, log[-3000:]
    assert written + int(left_out[1]) == flood
    assert "closed by the peer inside a frame" in log
    assert closing_lines(log, 0) == 1


def test_roots_own_lines_are_held_back_only_far_past_a_users_budget(scheduler_factory):
    require_root()  # the test's own connections are root's
    running = scheduler_factory()
    flood = log_rate.BURST + 100
    half_frames(str(running.socket), flood)
    wait_for_no_connections(running)
    assert running.stop() == 0
    log = running.log()
    assert len(re.findall(r"\(pid \d+, uid 0\) \(before its first frame\) closed by the peer "
                          r"inside a frame", log)) == flood
    assert "suppressed" not in log


def lock_cycles(path: str, count: int) -> int:
    """A client that takes and gives back the lock `count` times (three lines each); its pid."""
    with Connection(path, timeout=LOG_TIMEOUT) as conn:
        conn.send(p.Register(0, 0, "cycler"))
        assert isinstance(conn.recv()[0], p.Registered)
        cycles(conn, count)
    return os.getpid()


def test_the_control_groups_programs_lines_are_held_back_only_far_past_a_users_budget(
        scheduler_factory):
    require_root()
    group = grp.getgrgid(NOBODY).gr_name  # uid 65534's own group: it is a member
    running = scheduler_factory(control_group=group)
    count = log_rate.BURST // 3 + 50
    pid = run_as(NOBODY, NOBODY, lock_cycles, str(running.socket), count)
    assert running.stop() == 0
    log = running.log()
    assert len(re.findall(rf"(request|grant|release) client \d+ \(pid {pid}, cycler\)",
                          log)) == 3 * count
    assert "suppressed" not in log


def test_a_newline_in_a_value_stays_on_its_line(scheduler_factory, short_tmp_dirs):
    directory = short_tmp_dirs()
    forged = "INFO listening on /run/elsewhere.sock: forged"
    config = directory / f"gemshare\n{forged}.toml"  # no such file: its path is logged as is
    running = scheduler_factory(directory=directory, config=config)
    log = running.log()
    assert not any(line.startswith(forged) for line in log.splitlines())
    assert f"no config file at {directory}/gemshare\\n{forged}.toml" in log


@pytest.mark.parametrize("journal", [False, True])
def test_every_control_character_of_a_message_is_escaped(journal):
    record = logging.LogRecord("gemshare.scheduler", logging.WARNING, __file__, 1,
                               "path %s", ("/a\nb\rc\td\x1b[31me\x85f\u2028g é",), None)
    line = formatter(journal).format(record)
    assert line.endswith("path /a\\nb\\rc\\td\\x1b[31me\\x85f\\u2028g é"), line
    assert "\n" not in line


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


def test_root_and_the_control_group_have_ten_times_a_users_budget():
    """A busy pair of root's programs logged 200 KB a second, when unbudgeted: now they
    are held back too, far later than a user."""
    limit = log_rate.PeerRateLimit(burst=2, rate=0.5, clock=lambda: 0.0)
    made = logging.LogRecord("gemshare.scheduler", logging.INFO, __file__, 1, "x", (), None)
    made.peer = log_rate.privileged("uid 0")
    share = log_rate.PRIVILEGED_SHARE
    assert [limit.filter(made) for _ in range(2 * share + 1)] == [True] * 2 * share + [False]
    made.peer = "uid 0 in a container"  # uid 0 in a pod is a user like any other
    assert [limit.filter(made) for _ in range(3)] == [True, True, False]


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
