"""Running a command with its standard error on a terminal (a pseudo-terminal), as a user at a
shell sees it: commands that write one plain line elsewhere keep their richer output there."""

from __future__ import annotations

import os
import pty
import subprocess


def stderr_on_terminal(command: list[str], env: dict | None = None,
                       timeout: float = 60) -> tuple[int, str]:
    """(exit status, what the command wrote to its terminal standard error)."""
    main, terminal = pty.openpty()
    try:
        process = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=terminal, timeout=timeout, env=env)
        os.close(terminal)
        terminal = -1
        shown = b""
        while chunk := _read_or_end(main):
            shown += chunk
    finally:
        os.close(main)
        if terminal >= 0:
            os.close(terminal)
    return process.returncode, shown.decode()


def _read_or_end(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO once the other end is closed
        return b""
