"""The lock file beside the socket, in a directory other users may write (sticky, like /tmp): one
that is not plainly ours is refused by name and owner, and nothing read from it is ever shown."""

import fcntl
import os
import pwd
import stat

import pytest
from privileges import require_root, run_as

from gemshare_nvs.wire.listener import open_listener

NOBODY = 65534
PLANTED = "\x1b[2J pid 1 \x1b]0;owned\x07 please run rm -rf"  # terminal escapes, lies


def plant(path: str, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    os.write(fd, PLANTED.encode())
    os.fchmod(fd, mode)
    os.close(fd)


@pytest.fixture
def shared_directory(short_tmp_dirs):
    directory = short_tmp_dirs()
    directory.chmod(0o1777)
    return directory


def test_lock_file_of_another_user_is_refused_by_owner(shared_directory, run_scheduler):
    require_root()
    lock = shared_directory / "scheduler.sock.lock"
    run_as(NOBODY, NOBODY, plant, str(lock), 0o644)
    result = run_scheduler("--socket", str(shared_directory / "scheduler.sock"))
    assert result.returncode == 1
    name = pwd.getpwuid(NOBODY).pw_name
    assert f"the lock file {lock} belongs to uid {NOBODY} ({name}), not to this user" \
        in result.stderr
    assert "please" not in result.stderr and "\x1b" not in result.stderr
    assert lock.read_text() == PLANTED and lock.stat().st_uid == NOBODY  # left untouched
    assert not (shared_directory / "scheduler.sock").exists()


def test_lock_file_others_may_write_is_refused(shared_directory, run_scheduler):
    lock = shared_directory / "scheduler.sock.lock"
    plant(str(lock), 0o666)
    result = run_scheduler("--socket", str(shared_directory / "scheduler.sock"))
    assert result.returncode == 1
    assert f"the lock file {lock} is writable by other users (mode 0666)" in result.stderr
    assert lock.read_text() == PLANTED


def test_hard_linked_lock_file_is_refused(shared_directory, run_scheduler):
    victim = shared_directory / "precious"
    victim.write_text("keep me")
    os.link(victim, shared_directory / "scheduler.sock.lock")
    result = run_scheduler("--socket", str(shared_directory / "scheduler.sock"))
    assert result.returncode == 1 and "has 2 hard links" in result.stderr
    assert victim.read_text() == "keep me"


def test_text_in_a_held_lock_file_is_never_quoted(shared_directory, run_scheduler):
    lock = shared_directory / "scheduler.sock.lock"
    plant(str(lock), 0o644)
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a live scheduler holds it
        result = run_scheduler("--socket", str(shared_directory / "scheduler.sock"))
    finally:
        os.close(fd)
    assert result.returncode == 1
    assert "another gemshare-scheduler (pid unknown) is already running" in result.stderr
    assert "please" not in result.stderr and "\x1b" not in result.stderr


def test_lock_file_is_made_0644_and_ours_whatever_the_umask(shared_directory):
    old_umask = os.umask(0o077)
    try:
        listening = open_listener(shared_directory / "scheduler.sock")
    finally:
        os.umask(old_umask)
    try:
        info = os.stat(shared_directory / "scheduler.sock.lock")
        assert stat.S_IMODE(info.st_mode) == 0o644 and info.st_uid == os.geteuid()
        assert (shared_directory / "scheduler.sock.lock").read_text() == f"{os.getpid()}\n"
    finally:
        listening.close()
    assert not (shared_directory / "scheduler.sock.lock").exists()
