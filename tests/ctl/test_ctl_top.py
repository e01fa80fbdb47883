"""`gemsharectl top --once` against a real scheduler with stand-in clients holding and waiting."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import sys
import termios
import time

import pytest
from ctl_helpers import RUN_TIMEOUT, holder_and_waiter

from gemshare_ctl.errors import ExitCode


@pytest.fixture
def holding_and_waiting(scheduler, stand_in_client):
    return (scheduler, *holder_and_waiter(scheduler, stand_in_client)[:2])


def client_row(output: str, client_id: int, name: str) -> str:
    rows = [line for line in output.splitlines()
            if re.search(rf"^\W*{client_id}\b", line.strip()) and name in line]
    assert rows, f"no row for client {client_id} {name} in:\n{output}"
    return rows[0]


def share_in(row: str) -> int:
    shares = re.findall(r"(\d+)%", row)
    assert len(shares) == 1, row
    return int(shares[0])


def test_once_shows_the_holder_near_all_of_the_gpu_and_the_waiter_none(ctl, holding_and_waiting):
    scheduler, holder, waiter = holding_and_waiting
    result = ctl("--socket", str(scheduler.socket), "top", "--once", "--interval", "1")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert str(scheduler.socket) in out
    device_row = next(line for line in out.splitlines() if f"#{holder.id} trainer-a" in line)
    assert f"#{waiter.id} trainer-b" in device_row.split(f"#{holder.id} trainer-a", 1)[1]
    holding = client_row(out, holder.id, "trainer-a")
    assert "holding" in holding and "3.0 GiB" in holding
    assert share_in(holding) >= 90
    waiting = client_row(out, waiter.id, "trainer-b")
    assert "waiting" in waiting and "ml/job-7" in waiting
    assert share_in(waiting) == 0
    assert "warming up" not in out and "q quits" not in out
    assert "\x1b" not in out  # a plain frame for scripts: no Live, no escapes


def test_once_with_no_clients(ctl, scheduler):
    result = ctl("--socket", str(scheduler.socket), "top", "--once", "--interval", "0.1")
    assert result.returncode == 0, result.stderr
    assert "No clients connected." in result.stdout


def test_no_scheduler_fails_as_status_does(ctl, tmp_path):
    missing = tmp_path / "scheduler.sock"
    top = ctl("--socket", str(missing), "top", "--once")
    status = ctl("--socket", str(missing), "status")
    assert status.returncode == ExitCode.UNREACHABLE
    assert (top.returncode, top.stderr, top.stdout) == (status.returncode, status.stderr, "")
    assert "Traceback" not in top.stderr


@pytest.mark.parametrize("value", ["0", "-1", "abc", "61"])
def test_bad_interval_is_refused(ctl, tmp_path, value):
    result = ctl("--socket", str(tmp_path / "none.sock"), "top", "--once", "--interval", value)
    assert result.returncode == ExitCode.INVALID
    assert "--interval" in result.stderr


def read_terminal(fd: int, deadline: float, until=lambda out: False) -> bytes:
    """What the program writes, until `until(output)` holds or it closes the terminal."""
    out = b""
    while not until(out):
        assert time.monotonic() < deadline, f"gemsharectl top stalled after writing {out!r}"
        if select.select([fd], [], [], 0.2)[0]:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the program has closed its side of the terminal
                return out
            if not chunk:
                return out
            out += chunk
    return out


def run_on_terminal(socket, keys: bytes) -> tuple[int, bytes, list]:
    """Start `gemsharectl top` on a pseudo-terminal, press `keys` once a frame is drawn, and
    return its exit status, what it wrote, and the terminal's modes after it exited."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec at once, never back into pytest
        try:
            os.execv(sys.executable, [sys.executable, "-m", "gemshare_ctl", "--socket",
                                      str(socket), "top", "--interval", "0.2"])
        finally:
            os._exit(127)
    deadline = time.monotonic() + RUN_TIMEOUT
    try:
        out = read_terminal(fd, deadline, lambda out: b"Clients" in out)
        os.write(fd, keys)
        out += read_terminal(fd, deadline)
        while not (done := os.waitpid(pid, os.WNOHANG))[0]:
            assert time.monotonic() < deadline, f"gemsharectl top did not quit on {keys!r}"
            time.sleep(0.02)
        pid = 0
        return os.waitstatus_to_exitcode(done[1]), out, termios.tcgetattr(fd)
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)


@pytest.mark.parametrize("keys", [b"q", b"\x03"], ids=["q", "ctrl-c"])
def test_live_view_quits_and_restores_the_terminal(holding_and_waiting, keys):
    scheduler, holder, _ = holding_and_waiting
    status, out, modes = run_on_terminal(scheduler.socket, keys)
    assert status == 0, out
    assert b"Traceback" not in out and b"trainer-a" in out
    assert out.rstrip().endswith(b"\x1b[?1049l")  # back from the alternate screen
    local_modes = modes[3]
    assert local_modes & termios.ICANON and local_modes & termios.ECHO  # cbreak undone
