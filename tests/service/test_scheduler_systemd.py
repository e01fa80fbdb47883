"""systemd integration without systemd: READY=1 on NOTIFY_SOCKET, and an inherited socket."""

import socket
import sys
import uuid

import pytest

NOTIFY_TIMEOUT = 15.0  # only catches hangs

# LISTEN_PID must name the scheduler's own pid, known only in the child: this wrapper moves the
# listening socket to fd 3, sets the variables as systemd would, and execs the scheduler.
ACTIVATE = ("import os, sys; fd = int(sys.argv[1]); os.dup2(fd, 3); os.close(fd); "
            "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='1', "
            "LISTEN_FDNAMES='gemshare-scheduler.socket'); os.execv(sys.argv[2], sys.argv[2:])")


def datagram_socket(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(NOTIFY_TIMEOUT)
    return sock


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_ready_is_sent_once_listening_and_stopping_on_exit(scheduler_factory, short_tmp_dirs,
                                                           abstract):
    if abstract:
        name = f"gemshare-test-{uuid.uuid4().hex}"
        notify, address = datagram_socket("\0" + name), "@" + name
    else:
        address = str(short_tmp_dirs() / "notify")
        notify = datagram_socket(address)
    with notify:
        running = scheduler_factory(env={"NOTIFY_SOCKET": address})
        ready = notify.recv(4096).decode()
        assert ready.splitlines()[0] == "READY=1"
        assert f"STATUS=listening on {running.socket}" in ready
        with running.connect() as control:  # it really was listening when it said so
            assert control.request({"op": "status"})["ok"] is True
        assert running.stop() == 0
        assert notify.recv(4096) == b"STOPPING=1"


def test_unreachable_notify_socket_is_logged_not_fatal(scheduler_factory, short_tmp_dirs):
    running = scheduler_factory(env={"NOTIFY_SOCKET": str(short_tmp_dirs() / "absent")})
    with running.connect() as control:
        assert control.request({"op": "status"})["ok"] is True
    assert "cannot notify systemd" in running.log()


def test_inherited_listening_socket_is_served_and_left_in_place(scheduler_factory,
                                                                short_tmp_dirs):
    directory = short_tmp_dirs()
    path = directory / "scheduler.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()
    fd = listener.fileno()
    with listener:
        # Had it bound its own socket it would have found ours alive and refused to start.
        running = scheduler_factory(directory=directory, pass_fds=(fd,),
                                    wrapper=[sys.executable, "-c", ACTIVATE, str(fd)])
        with running.connect() as control:
            assert control.request({"op": "status"})["ok"] is True
        assert running.stop() == 0
        log = running.log()
        assert f"listening on {path} (socket from systemd)" in log
        assert path.exists()  # systemd's socket, not ours to remove


def test_listen_pid_of_another_process_is_ignored(scheduler_factory):
    running = scheduler_factory(env={"LISTEN_PID": "1", "LISTEN_FDS": "1"})
    assert "socket from systemd" not in running.log()
    with running.connect() as control:
        assert control.request({"op": "status"})["ok"] is True
