"""The shared `scheduler_factory` fixture starts a real scheduler that grants, logs and stops."""

import subprocess
import sys
import time

import pytest

from gemshare_nvs import protocol as p
from gemshare_nvs.service.readiness import NotListening, says_listening, wait_until_listening


def test_factory_passes_options_and_grants_in_order(scheduler_factory):
    running = scheduler_factory(tq=7, anti_thrash="on", grace_ms=300)
    first, second = running.connect(), running.connect()
    first.send(p.Register(0, 0, "first"))
    second.send(p.Register(0, 0, "second"))
    registered, _ = first.recv()
    assert registered.tq_seconds == 7 and registered.mode == p.Mode.ON
    second.recv()
    first.send(p.RequestLock(0))
    assert first.recv()[0] == p.LockGranted(0, 0, 7000)
    second.send(p.RequestLock(0))
    with running.connect() as control:  # the request must arrive before the release
        for _ in range(500):
            if control.request({"op": "status"})["status"]["devices"][0]["waiters"]:
                break
            time.sleep(0.01)
    first.send(p.LockReleased(0, p.ReleaseReason.IDLE))
    assert second.recv()[0] == p.LockGranted(0, p.GRANT_AFTER_WAIT, 7000)
    assert "grant client" in running.log()
    first.close()
    second.close()
    assert running.stop() == 0
    assert not running.socket.exists()


def test_default_scheduler_reports_defaults(scheduler):
    with scheduler.connect() as control:
        status = control.request({"op": "status"})["status"]
    assert (status["tq"], status["anti_thrash"], status["grace_ms"]) == (30, "on", 10000)


def test_the_factory_returns_once_the_scheduler_says_it_listens(scheduler_factory):
    """Its own word, logged once it serves: a connection alone would be accepted into the
    socket's backlog before that."""
    running = scheduler_factory()
    assert says_listening(running.log(), running.socket)
    with running.connect() as control:
        assert control.request({"op": "status"})["ok"]


def test_the_listening_line_names_that_socket_alone():
    line = ("2026-11-26 14:12:37.375 INFO listening on /tmp/gs-1/scheduler.sock: tq 1 s, "
            "anti-thrash on\n")
    assert says_listening(line, "/tmp/gs-1/scheduler.sock")
    assert says_listening(line.replace(".sock:", ".sock (socket from systemd):"),
                          "/tmp/gs-1/scheduler.sock")
    assert not says_listening(line, "/tmp/gs-1/scheduler.so")
    assert not says_listening(line, "/tmp/gs-2/scheduler.sock")
    assert not says_listening("", "/tmp/gs-1/scheduler.sock")


def test_a_scheduler_that_exits_first_is_reported_with_its_log(short_tmp_dirs):
    directory = short_tmp_dirs()
    log_path = directory / "scheduler.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "gemshare_nvs.daemon", "--socket",
                                    str(directory / "s.sock"), "--tq", "0"],
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    with pytest.raises(NotListening, match=r"exited with status 2 before listening on "
                                           r"[^\n]*s\.sock:\n(.|\n)*--tq"):
        wait_until_listening(log_path, directory / "s.sock", process, timeout=60)
