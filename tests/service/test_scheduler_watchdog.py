"""systemd's watchdog: with WATCHDOG_USEC set, WATCHDOG=1 comes from the event loop at half that
interval, and stops when the loop stops (here: SIGSTOP), which is how systemd tells a hang."""

import os
import signal
import socket
import time

from gemshare_nvs.service.sdnotify import watchdog_interval

WATCHDOG_USEC = 200_000  # pings every 0.1 s
RECV_TIMEOUT = 15.0  # only catches hangs


def notify_socket(path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(RECV_TIMEOUT)
    return sock


def next_ping(sock: socket.socket) -> None:
    while sock.recv(4096) != b"WATCHDOG=1":
        pass


def is_stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


def drain(sock: socket.socket) -> list:
    sock.setblocking(False)
    try:
        got = []
        while True:
            try:
                got.append(sock.recv(4096))
            except BlockingIOError:
                return got
    finally:
        sock.settimeout(RECV_TIMEOUT)


def test_watchdog_pings_come_while_the_loop_runs_and_stop_when_it_does(scheduler_factory,
                                                                       short_tmp_dirs):
    address = short_tmp_dirs() / "notify"
    with notify_socket(address) as notify:
        running = scheduler_factory(env={"NOTIFY_SOCKET": str(address),
                                         "WATCHDOG_USEC": str(WATCHDOG_USEC)})
        for _ in range(3):
            next_ping(notify)
        assert "sending WATCHDOG=1 to systemd every 0.1 s" in running.log()

        running.process.send_signal(signal.SIGSTOP)
        try:
            while not is_stopped(running.process.pid):
                time.sleep(0.01)
            drain(notify)  # what it sent before it stopped
            time.sleep(5 * WATCHDOG_USEC / 1e6)
            assert drain(notify) == []
        finally:
            running.process.send_signal(signal.SIGCONT)
        next_ping(notify)  # and again once it runs


def test_no_pings_when_the_watchdog_is_meant_for_another_process(scheduler_factory, short_tmp_dirs):
    address = short_tmp_dirs() / "notify"
    with notify_socket(address) as notify:
        running = scheduler_factory(env={"NOTIFY_SOCKET": str(address),
                                         "WATCHDOG_USEC": str(WATCHDOG_USEC),
                                         "WATCHDOG_PID": str(os.getpid())})
        assert notify.recv(4096).startswith(b"READY=1")
        with running.connect() as control:  # it runs, and has had time to ping
            assert control.request({"op": "status"})["ok"] is True
        time.sleep(5 * WATCHDOG_USEC / 1e6)
        assert b"WATCHDOG=1" not in drain(notify)
        assert "WATCHDOG" not in running.log()


def test_interval_is_half_of_watchdog_usec_and_needs_a_notify_socket():
    base = {"NOTIFY_SOCKET": "/run/systemd/notify"}
    assert watchdog_interval({**base, "WATCHDOG_USEC": "30000000"}) == 15.0
    assert watchdog_interval({**base, "WATCHDOG_USEC": "30000000",
                              "WATCHDOG_PID": str(os.getpid())}) == 15.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000"}) is None
    for bad in ("", "0", "-5", "soon"):
        assert watchdog_interval({**base, "WATCHDOG_USEC": bad}) is None
