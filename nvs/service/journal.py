"""Log lines as journald wants them when stderr is its stream: the one format of every
long-running command (the scheduler's, the device plugin's).

systemd sets JOURNAL_STREAM to the device and inode of the stream it connected to stderr. A
line that starts with `<N>` (sd-daemon's convention, N a syslog priority) is stored with that
priority, so `journalctl -p warning` finds the warnings; journald also stamps each line itself.
Anywhere else (a terminal, a file, a stderr redirected by a service's child) lines carry the
time instead and no prefix.

Either way a message is one line: whatever it quotes (a path from the config file, a name a
client sent) has its control characters escaped, so no value can start a line of its own that
would read as the scheduler's. A traceback's lines are the one exception, as written by Python.
"""

from __future__ import annotations

import logging
import os
import sys

from ..core.model.text import escaped

# syslog priorities: sd-daemon.h's SD_ERR, SD_WARNING, SD_INFO and SD_DEBUG.
PRIORITIES = ((logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6))
DEBUG_PRIORITY = 7


def stderr_is_journal(environ=os.environ, fd: int = 2) -> bool:
    """Whether `fd` is the very stream JOURNAL_STREAM names (not merely inherited with it)."""
    device, _, inode = environ.get("JOURNAL_STREAM", "").partition(":")
    try:
        info = os.fstat(fd)
        return (int(device), int(inode)) == (info.st_dev, info.st_ino)
    except (ValueError, OSError):
        return False


def priority(level: int) -> int:
    for floor, number in PRIORITIES:
        if level >= floor:
            return number
    return DEBUG_PRIORITY


class OneLineFormatter(logging.Formatter):
    """A record's message with its control characters escaped."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escaped(record.message)
        return super().formatMessage(record)


class JournalFormatter(OneLineFormatter):
    """Each line of a record prefixed with its priority: a traceback's lines keep it too."""

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{priority(record.levelno)}>"
        return "\n".join(prefix + line for line in super().format(record).split("\n"))


def formatter(journal: bool) -> logging.Formatter:
    if journal:
        return JournalFormatter("%(levelname)s %(message)s")
    return OneLineFormatter("%(asctime)s.%(msecs)03d %(levelname)s %(message)s",
                            "%Y-%m-%d %H:%M:%S")


def stderr_handler() -> logging.Handler:
    """A handler that writes to stderr in the format above, chosen for where stderr goes."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(stderr_is_journal()))
    return handler
