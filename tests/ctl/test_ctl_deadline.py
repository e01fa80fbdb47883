"""A change gemsharectl reports as failed never happens later: its request carries the moment it
stops waiting, and a scheduler that gets to it after that drops it."""

import json
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from gemshare_ctl import client
from gemshare_ctl.errors import CtlError, ExitCode
from gemshare_nvs import protocol
from gemshare_nvs.config import control
from gemshare_nvs.wire.connection import Connection

LOG_TIMEOUT = 15.0  # only catches hangs


def test_change_that_timed_out_on_a_stopped_scheduler_is_not_applied_later(scheduler_factory,
                                                                           ctl):
    running = scheduler_factory()
    socket = str(running.socket)
    running.process.send_signal(signal.SIGSTOP)
    try:
        failed = ctl("--socket", socket, "--timeout", "1", "--set-tq", "3")
    finally:
        running.process.send_signal(signal.SIGCONT)
    assert failed.returncode == ExitCode.UNREACHABLE, failed.stderr
    assert "did not answer within 1 s" in failed.stderr
    deadline = time.monotonic() + LOG_TIMEOUT
    while "dropped a request its sender gave up on" not in running.log():
        assert time.monotonic() < deadline, running.log()
        time.sleep(0.05)
    status = ctl("--socket", socket, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["tq"] == 30
    # A scheduler that answers in time applies the same change.
    assert ctl("--socket", socket, "--timeout", "5", "--set-tq", "3").returncode == 0
    assert json.loads(ctl("--socket", socket, "status", "--json").stdout)["tq"] == 3


class SilentScheduler:
    """A socket that takes one request and never answers it, as a stopped scheduler's kernel
    queue would; `body` is the request it read."""

    def __init__(self, path: Path):
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(1)
        self.body: dict | None = None
        self._kept = None
        self.thread = threading.Thread(target=self._take_one)
        self.thread.start()

    def _take_one(self) -> None:
        self._kept, _ = self.listener.accept()
        self._kept.settimeout(LOG_TIMEOUT)
        decoder = protocol.FrameDecoder()
        while (item := decoder.next()) is None:
            decoder.feed(self._kept.recv(65536))
        self.body = item[0].body

    def close(self) -> None:
        self.thread.join(LOG_TIMEOUT)
        if self._kept is not None:
            self._kept.close()
        self.listener.close()


def test_the_deadline_sent_leaves_the_reply_a_margin_before_gemsharectl_gives_up(
        short_tmp_dirs):
    silent = SilentScheduler(short_tmp_dirs() / "silent.sock")
    try:
        with pytest.raises(CtlError, match="did not answer within 1 s"):
            client.change_settings(silent.listener.getsockname(), 1.0, tq=3)
        gave_up = control.now_ms()
    finally:
        silent.close()
    # A quarter of the wait: a change applied by its deadline has that long to be answered.
    assert silent.body["deadline_ms"] <= gave_up - 250, (silent.body, gave_up)


def test_an_answer_there_by_the_deadline_is_read_however_late_the_reader_comes(
        short_tmp_dirs):
    path = short_tmp_dirs() / "answers.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(1)
        with Connection(path) as connection:
            answering, _ = listener.accept()
            with answering:
                answering.sendall(protocol.encode(protocol.ControlReply({"ok": True}), 1))
                # Its whole wait already over: only what has come can still be read.
                reply, seq = connection.recv(timeout=0)
    assert reply.body == {"ok": True} and seq == 1
