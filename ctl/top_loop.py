"""The polling loop of `gemsharectl top`, and where its keys come from.

The loop takes its status source, display, key source and clock as arguments, so a test drives
it with scripted keys and a fake clock; only `TerminalKeys` touches the terminal.
"""

from __future__ import annotations

import os
import select
import sys
import termios
import time
import tty
from typing import Callable, Optional, Protocol

from .shares_window import ShareWindow, hold_times

QUIT_KEYS = frozenset("qQ")


class KeySource(Protocol):
    def wait(self, timeout: float) -> Optional[str]:
        """The next key pressed within `timeout` seconds, else None once they have passed."""


class NoKeys:
    """Stdin is not a terminal: nothing to read, so waiting is sleeping (Ctrl-C still quits)."""

    def __init__(self, sleep: Callable[[float], None] = time.sleep):
        self._sleep = sleep

    def wait(self, timeout: float) -> Optional[str]:
        self._sleep(timeout)
        return None


class TerminalKeys:
    """Single keys from a terminal in cbreak mode (no Enter needed, Ctrl-C still a signal); the
    terminal's mode is restored on exit, whatever ends the loop."""

    def __init__(self, fd: int):
        self._fd = fd
        self._saved = None

    def __enter__(self) -> "TerminalKeys":
        self._saved = termios.tcgetattr(self._fd)
        tty.setcbreak(self._fd)
        return self

    def __exit__(self, *exc) -> None:
        termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)

    def wait(self, timeout: float) -> Optional[str]:
        ready, _, _ = select.select([self._fd], [], [], max(0.0, timeout))
        if not ready:
            return None
        data = os.read(self._fd, 1)
        if not data:  # the terminal hung up: nothing more will come, so quit
            return "q"
        return data.decode(errors="replace")


def stdin_keys():
    """TerminalKeys when stdin is a terminal, else None (use NoKeys)."""
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, ValueError, OSError):
        return None
    return TerminalKeys(fd) if os.isatty(fd) else None


def run(poll: Callable[[], dict], show: Callable[[dict, ShareWindow], None], keys: KeySource,
        clock: Callable[[], float], interval: float, window: ShareWindow | None = None) -> int:
    """Poll, show, wait `interval` for a key; until a quit key. Returns how many polls it made.

    The wait is measured from the poll, so a slow scheduler does not stretch the refresh."""
    window = window or ShareWindow()
    polls = 0
    while True:
        polled_at = clock()
        status = poll()
        polls += 1
        window.add(clock(), hold_times(status))
        show(status, window)
        while (left := polled_at + interval - clock()) > 0:
            if keys.wait(left) in QUIT_KEYS:
                return polls


def once(poll: Callable[[], dict], sleep: Callable[[float], None], clock: Callable[[], float],
         interval: float, window: ShareWindow | None = None) -> dict:
    """Two polls `interval` apart, so the shares are measured; returns the second status."""
    window = window or ShareWindow()
    window.add(clock(), hold_times(poll()))
    sleep(interval)
    status = poll()
    window.add(clock(), hold_times(status))
    return status
