"""What can go wrong in gemsharectl, and the exit status each failure gets."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    UNREACHABLE = 1  # no scheduler on the socket, it hung up, it did not answer, or it failed
    INVALID = 2  # bad command line or refused value (Typer's usage errors are 2 as well)
    PERMISSION = 3  # the socket may not be opened, or this user may not change settings


class CtlError(Exception):
    """A failure to report in one line (no traceback) and exit with `exit_code`."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
