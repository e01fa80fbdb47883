"""What keeps gemsharectl from connecting to a socket path, in words: connecting to a Unix socket
needs search (x) permission on every directory above it and write permission on the socket, not
read permission; and the path must be a socket."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _described(path: Path, info: os.stat_result) -> str:
    return f"{path} (mode {stat.S_IMODE(info.st_mode):04o}, owner {_owner(info.st_uid)})"


# What connecting needs of each path on the way, and what it is called.
SEARCH = (os.X_OK, "search the directory", "reaching a socket needs search (x) permission on "
          "every directory above it")
WRITE = (os.W_OK, "write to the socket", "connecting to a socket needs write (w) permission on it")


def permission_problem(path: Path) -> str | None:
    """Which permission this process lacks to connect to `path`, or None when it has them (or
    the path is not there: that is another failure)."""
    path = Path(os.path.abspath(path))
    me = f"this user ({_owner(os.getuid())})"
    for where, (mode, act, needs) in [*((d, SEARCH) for d in reversed(path.parents)),
                                      (path, WRITE)]:
        try:
            info = where.stat()
        except OSError:
            return None
        if not os.access(where, mode):
            return f"{me} may not {act} {_described(where, info)}, and {needs}"
    return None


def not_a_socket(path: Path) -> str | None:
    """What `path` is when it exists but is no socket (a regular file, a directory), else
    None."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if stat.S_ISSOCK(mode):
        return None
    kind = "a directory" if stat.S_ISDIR(mode) else "a regular file" if stat.S_ISREG(mode) \
        else "not a socket"
    return f"{path} is {kind}, not a socket"
