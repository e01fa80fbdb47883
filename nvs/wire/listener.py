"""The scheduler's listening socket: inherited from systemd, or bound by us with care.

Binding: the directory, and any missing one above it, is created 0755 whatever the umask; an
existing one must not let other users swap files in it (owned by root or us, and not writable by
others unless sticky), since we run as root. The socket file is created mode 0666 so any local
user can connect as a client (control permissions are checked per request, from SO_PEERCRED). A
lock file beside the socket (`<socket>.lock`, mode 0644) makes two schedulers on one path
impossible; one that is a symbolic link, another user's, hard-linked or writable by others is
refused, never written to nor quoted. A socket file nobody answers on is stale and replaced; one
that answers belongs to a live scheduler (or to systemd's socket unit) and is left alone.

The backlog (connections made and not yet accepted) is as long as the system allows, for ours and
for one systemd passes (listen() again sets its length): a burst of connections, or a user who
connects in a loop, must not fill it while the scheduler's accept loop empties it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pwd
import socket
import stat
from pathlib import Path

SD_LISTEN_FDS_START = 3
SOMAXCONN = Path("/proc/sys/net/core/somaxconn")
FALLBACK_BACKLOG = 4096  # where the system's limit cannot be read (Linux's default since 5.4)
DIRECTORY_MODE = 0o755
LOCK_MODE = 0o644  # others may read the pid in it, never write it


class ListenerError(Exception):
    """The socket cannot be served; the message names the path and what to do."""


class Listening:
    """A listening socket and what must be undone at exit."""

    def __init__(self, sock: socket.socket, path: Path, inherited: bool, lock_fd: int | None):
        self.sock = sock
        self.path = path
        self.inherited = inherited
        self._lock_fd = lock_fd
        self._inode = None if inherited else os.stat(path).st_ino

    def close(self) -> None:
        """Close the socket; remove the socket file only if we bound it and it is still ours."""
        self.sock.close()
        if self._inode is not None:
            try:
                if os.stat(self.path).st_ino == self._inode:
                    os.unlink(self.path)
            except FileNotFoundError:
                pass
            self._inode = None
        if self._lock_fd is not None:
            try:
                if os.stat(lock_path(self.path)).st_ino == os.fstat(self._lock_fd).st_ino:
                    os.unlink(lock_path(self.path))
            except FileNotFoundError:
                pass
            os.close(self._lock_fd)
            self._lock_fd = None


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def open_listener(path: Path, environ=os.environ) -> Listening:
    inherited = inherited_socket(environ)
    if inherited is not None:
        bound = inherited.getsockname()
        if isinstance(bound, str) and bound.startswith("/"):
            path = Path(bound)
            lock_fd = _take_lock(path)
        else:
            lock_fd = None  # an abstract or unnamed socket has no file to guard
        return Listening(inherited, path, inherited=True, lock_fd=lock_fd)
    _make_directory(path.parent)
    lock_fd = _take_lock(path)
    try:
        _clear_stale(path)
        sock = _bind(path)
    except BaseException:
        os.unlink(lock_path(path))
        os.close(lock_fd)
        raise
    return Listening(sock, path, inherited=False, lock_fd=lock_fd)


def inherited_socket(environ=os.environ) -> socket.socket | None:
    """The listening socket systemd passed as fd 3 (LISTEN_FDS/LISTEN_PID), or None."""
    if environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    try:
        count = int(environ.get("LISTEN_FDS", "0"))
    except ValueError:
        raise ListenerError(f"LISTEN_FDS={environ.get('LISTEN_FDS')!r} is not a number") from None
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        environ.pop(name, None)  # so nothing we start believes the sockets are its own
    if count < 1:
        return None
    try:
        sock = socket.socket(fileno=SD_LISTEN_FDS_START)
    except OSError as exc:
        raise ListenerError(f"LISTEN_FDS={count} but fd {SD_LISTEN_FDS_START} is not a socket "
                            f"({exc.strerror}); check the .socket unit") from None
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM \
            or not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        sock.detach()
        raise ListenerError(f"the socket passed as fd {SD_LISTEN_FDS_START} must be a listening "
                            "Unix stream socket (ListenStream= in the .socket unit)")
    os.set_inheritable(sock.fileno(), False)
    sock.listen(backlog())
    return sock


def backlog() -> int:
    """The longest listen queue the system allows (net.core.somaxconn; the kernel cuts any
    longer one to it)."""
    try:
        return max(1, int(SOMAXCONN.read_text()))
    except (OSError, ValueError):
        return FALLBACK_BACKLOG


def _make_directory(directory: Path) -> None:
    if directory.is_dir():
        _check_directory(directory)
        return
    missing = [directory, *(parent for parent in directory.parents if not parent.is_dir())]
    # Top down, each made 0755 whatever the umask: every user's programs must be able to walk
    # to the socket, and mkdir(parents=True) would leave the intermediate ones at the umask's mode.
    for each in reversed(missing):
        try:
            os.mkdir(each, DIRECTORY_MODE)
        except FileExistsError:
            continue  # made meanwhile by someone else: it is checked below if it is the last
        except OSError as exc:
            raise ListenerError(f"cannot create the socket directory {directory}: "
                                f"{exc.strerror}; run as root or choose another --socket") from None
        os.chmod(each, DIRECTORY_MODE)
    _check_directory(directory)


def _check_directory(directory: Path) -> None:
    """Refuse a directory where another user could replace the socket or the lock file."""
    info = os.stat(directory)
    if info.st_uid not in (0, os.geteuid()):
        raise ListenerError(f"the socket directory {directory} belongs to uid {info.st_uid}, "
                            "who could replace the socket; use a directory owned by root or by "
                            "this user, or choose another --socket")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
        raise ListenerError(f"the socket directory {directory} is writable by other users "
                            f"(mode {stat.S_IMODE(info.st_mode):04o}), who could replace the "
                            "socket; remove their write permission (or set the sticky bit) or "
                            "choose another --socket")


def _take_lock(path: Path) -> int:
    """An exclusive lock on `<socket>.lock`, held for the scheduler's life."""
    where = lock_path(path)
    for _ in range(10):  # retried only when the file was replaced under us
        _check_lock_file(where, _existing(where))
        try:
            fd = os.open(where, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW |
                         os.O_NONBLOCK, LOCK_MODE)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ListenerError(f"the lock file {where} is a symbolic link; remove it or "
                                    "choose another --socket") from None
            raise ListenerError(f"cannot create the lock file {where}: {exc.strerror}; run as "
                                "root or choose another --socket") from None
        try:
            # Checked again on what was opened: the file may have been swapped since the look.
            _check_lock_file(where, os.fstat(fd))
            os.fchmod(fd, LOCK_MODE)  # not the umask's idea of it
        except BaseException:
            os.close(fd)
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise ListenerError(f"another gemshare-scheduler (pid {holder}) is already running on "
                                f"socket {path}; stop it first or start this one with another "
                                "--socket") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(where).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return fd
        os.close(fd)  # the previous owner removed the file as we opened it: take the new one
    raise ListenerError(f"cannot lock {where}: it keeps being replaced")


def _existing(where: Path) -> os.stat_result | None:
    try:
        return os.lstat(where)
    except FileNotFoundError:
        return None


def _check_lock_file(where: Path, info: os.stat_result | None) -> None:
    """Refuse a lock file that is not plainly ours: in a shared directory such as /tmp another
    user may have put it there, to make us write into a file of their choosing, or to read
    what we would say about it."""
    if info is None:
        return
    if stat.S_ISLNK(info.st_mode):
        raise ListenerError(f"the lock file {where} is a symbolic link; remove it or choose "
                            "another --socket")
    if not stat.S_ISREG(info.st_mode):
        raise ListenerError(f"the lock file {where} is not a regular file; remove it or choose "
                            "another --socket")
    if info.st_uid != os.geteuid():
        raise ListenerError(f"the lock file {where} belongs to {owner_words(info.st_uid)}, not "
                            f"to this user ({owner_words(os.geteuid())}); remove it or choose "
                            "another --socket")
    if info.st_nlink != 1:
        raise ListenerError(f"the lock file {where} has {info.st_nlink} hard links, so it is "
                            "another file as well; remove it or choose another --socket")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ListenerError(f"the lock file {where} is writable by other users (mode "
                            f"{stat.S_IMODE(info.st_mode):04o}); remove it or choose another "
                            "--socket")


def owner_words(uid: int) -> str:
    """A uid as messages name it: with its user name when it has one."""
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _holder(fd: int) -> str:
    """The pid the running scheduler wrote in the lock file; only a number is ever quoted."""
    text = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
    return text if text.isdigit() and text.isascii() else "unknown"


def _clear_stale(path: Path) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ListenerError(f"{path} exists and is not a socket; remove it or choose another "
                            "--socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2)
    try:
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        pass  # nobody listens: stale, left by a scheduler that died
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise ListenerError(f"cannot check whether socket {path} is in use: "
                                f"{exc.strerror}") from None
    else:
        raise ListenerError(f"a scheduler is already listening on socket {path} (perhaps "
                            "systemd's gemshare-scheduler.socket); stop it first or choose "
                            "another --socket")
    finally:
        probe.close()
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _bind(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    # The file is made 0666 (any local user may be a client) by bind itself: a chmod after it
    # would follow whatever the path names by then. We run single-threaded here, so the
    # process-wide umask can be borrowed.
    old_umask = os.umask(0o111)
    try:
        sock.bind(str(path))
        sock.listen(backlog())
    except OSError as exc:
        sock.close()
        raise ListenerError(f"cannot listen on socket {path}: {exc.strerror or exc}") from None
    finally:
        os.umask(old_umask)
    return sock
