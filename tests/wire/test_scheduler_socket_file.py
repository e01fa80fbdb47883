"""The socket file: directory, modes, stale files, a live owner, clean exit on signals."""

import os
import signal
import socket
import stat

import pytest
from privileges import run_as

from gemshare_nvs.wire.listener import open_listener


def stale_socket_at(path) -> None:
    """A socket file nobody listens on, as a crashed scheduler leaves behind."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))


def test_stale_socket_file_is_replaced(scheduler_factory, short_tmp_dirs):
    directory = short_tmp_dirs()
    stale_socket_at(directory / "scheduler.sock")
    running = scheduler_factory(directory=directory)
    with running.connect() as control:
        assert control.request({"op": "status"})["ok"] is True


def test_second_scheduler_on_the_same_socket_is_refused(scheduler, run_scheduler):
    second = run_scheduler("--socket", str(scheduler.socket))
    assert second.returncode == 1
    assert str(scheduler.socket) in second.stderr and "already running" in second.stderr
    with scheduler.connect() as control:  # the first one is untouched
        assert control.request({"op": "status"})["ok"] is True


def test_second_scheduler_says_only_that_one_is_running(scheduler, run_scheduler):
    """Start-up lines (GPUs, config) would describe a scheduler that never starts."""
    second = run_scheduler("--socket", str(scheduler.socket))
    lines = second.stderr.splitlines()
    assert len(lines) == 1 and "already running" in lines[0], second.stderr


def test_socket_owned_by_another_listener_is_refused(short_tmp_dirs, run_scheduler):
    path = short_tmp_dirs() / "scheduler.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other:
        other.bind(str(path))
        other.listen()
        result = run_scheduler("--socket", str(path))
    assert result.returncode == 1
    assert f"already listening on socket {path}" in result.stderr
    assert stat.S_ISSOCK(os.lstat(path).st_mode)  # not removed


def test_path_that_is_not_a_socket_is_left_alone(short_tmp_dirs, run_scheduler):
    path = short_tmp_dirs() / "scheduler.sock"
    path.write_text("precious")
    result = run_scheduler("--socket", str(path))
    assert result.returncode == 1 and "is not a socket" in result.stderr
    assert path.read_text() == "precious"


def test_missing_directory_is_created_0755_and_socket_is_0666(short_tmp_dirs):
    parent = short_tmp_dirs()
    path = parent / "run" / "gemshare" / "scheduler.sock"
    old_umask = os.umask(0o077)  # a strict umask must not make the socket unreachable
    try:
        listening = open_listener(path)
    finally:
        os.umask(old_umask)
    try:
        assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o755
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o666
        assert os.stat(path.parent).st_uid == os.geteuid()
    finally:
        listening.close()
    assert not path.exists()


def test_directory_that_cannot_be_created_is_named(short_tmp_dirs, run_scheduler):
    blocker = short_tmp_dirs() / "file"
    blocker.write_text("")
    result = run_scheduler("--socket", str(blocker / "sub" / "scheduler.sock"))
    assert result.returncode == 1
    assert f"cannot create the socket directory {blocker / 'sub'}" in result.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly_and_removes_the_socket(scheduler, signum):
    scheduler.process.send_signal(signum)
    assert scheduler.process.wait(15) == 0
    assert not scheduler.socket.exists()
    assert not scheduler.socket.with_name("scheduler.sock.lock").exists()
    assert f"{signum.name} received: stopping" in scheduler.log()


def test_gemshare_socket_variable_chooses_the_path(short_tmp_dirs, run_scheduler):
    path = short_tmp_dirs() / "from-env.sock"
    path.write_text("not a socket")  # makes the run end at once, naming the path it used
    result = run_scheduler(env={"GEMSHARE_SOCKET": str(path)})
    assert result.returncode == 1 and f"{path} exists and is not a socket" in result.stderr


def test_directory_others_may_write_is_refused(short_tmp_dirs, run_scheduler):
    directory = short_tmp_dirs()
    directory.chmod(0o777)  # anyone could swap the socket for something else
    result = run_scheduler("--socket", str(directory / "scheduler.sock"))
    assert result.returncode == 1
    assert f"the socket directory {directory} is writable by other users (mode 0777)" \
        in result.stderr
    assert not (directory / "scheduler.sock").exists()


def test_sticky_shared_directory_is_accepted(short_tmp_dirs):
    directory = short_tmp_dirs()
    directory.chmod(0o1777)  # like /tmp: others cannot remove or rename our files
    listening = open_listener(directory / "scheduler.sock")
    try:
        assert stat.S_ISSOCK(os.lstat(directory / "scheduler.sock").st_mode)
    finally:
        listening.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory away")
def test_directory_of_another_user_is_refused(short_tmp_dirs, run_scheduler):
    directory = short_tmp_dirs()
    os.chown(directory, 65534, 65534)
    result = run_scheduler("--socket", str(directory / "scheduler.sock"))
    assert result.returncode == 1
    assert f"the socket directory {directory} belongs to uid 65534" in result.stderr


def test_lock_file_that_is_a_symbolic_link_is_not_followed(short_tmp_dirs, run_scheduler):
    directory = short_tmp_dirs()
    victim = directory / "precious"
    victim.write_text("keep me")
    (directory / "scheduler.sock.lock").symlink_to(victim)
    result = run_scheduler("--socket", str(directory / "scheduler.sock"))
    assert result.returncode == 1 and "is a symbolic link" in result.stderr
    assert victim.read_text() == "keep me"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
def test_every_directory_made_under_a_strict_umask_lets_others_reach_the_socket(
        short_tmp_dirs):
    parent = short_tmp_dirs()
    path = parent / "a" / "b" / "c" / "scheduler.sock"
    old_umask = os.umask(0o077)
    try:
        listening = open_listener(path)
    finally:
        os.umask(old_umask)
    try:
        for made in (parent / "a", parent / "a" / "b", parent / "a" / "b" / "c"):
            assert stat.S_IMODE(os.stat(made).st_mode) == 0o755, made
        # Listening, not served: the connect is accepted by the kernel, which is the point.
        run_as(65534, 65534, _connect_only, str(path))
    finally:
        listening.close()


def _connect_only(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
    return True
