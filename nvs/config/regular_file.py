"""Reading a file the scheduler trusts only so far: a regular file, of a bounded size.

Whatever sits at the path is looked at before it is opened and again once it is open, without
waiting on it: a FIFO would block the reader until someone writes to it (forever, at start-up),
a device may never end, and a directory cannot be read. Each is refused with words that say
what was found.

Blocking (the file may sit on a network filesystem): the server calls this off the event loop.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

# What a path that is not a regular file is, as messages name it.
KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
         (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
         (stat.S_ISSOCK, "a socket"))


class NotReadable(Exception):
    """The file is there but is not one to read; the message says why, without the path."""


def kind_of(mode: int) -> str | None:
    """What a file of this mode is, in words, when it is not a regular file; else None."""
    if stat.S_ISREG(mode):
        return None
    return next((words for test, words in KINDS if test(mode)), "not a regular file")


def refusal(mode: int) -> str | None:
    """Why a file of this mode is not read, or None for a regular file."""
    kind = kind_of(mode)
    return None if kind is None else f"it is {kind}, not a regular file"


def read_regular(path: Path, limit: int) -> bytes:
    """The whole of the regular file at `path`, at most `limit` bytes. FileNotFoundError when
    nothing is there; NotReadable for anything else that stops it being read."""
    try:
        why = refusal(os.stat(path).st_mode)
        if why is not None:
            raise NotReadable(why)
        # O_NONBLOCK: if a FIFO took the file's place since, opening it does not wait.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise NotReadable(f"cannot read it: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        why = refusal(info.st_mode)
        if why is not None:
            raise NotReadable(why)
        if info.st_size > limit:
            raise NotReadable(f"it is {info.st_size} bytes, more than the {limit} allowed")
        chunks, size = [], 0
        while size <= limit:  # one byte past the limit tells that it grew past it
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise NotReadable(f"it grew past the {limit} bytes allowed while being read")
        return b"".join(chunks)
    except OSError as exc:
        raise NotReadable(f"cannot read it: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
