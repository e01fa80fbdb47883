"""The scheduler's word that it serves: the line it logs once its socket accepts clients and every
part of it runs ("listening on PATH: tq ..."), when systemd also gets READY=1.

A program that starts a scheduler (the tests, the benchmarks) waits for that line, not for a
connection: the socket accepts connections into its backlog before the scheduler is ready.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

LISTENING = "listening on "
POLL_S = 0.02


class NotListening(Exception):
    """The scheduler ended, or did not say it listens in time; the message carries its log."""


def says_listening(log: str, socket: Path | str) -> bool:
    """Whether the log holds the line of a scheduler listening on `socket`."""
    # The path ends at ':' or at ' (socket from systemd)', so a longer path does not count.
    return re.search(re.escape(f"{LISTENING}{socket}") + r"[: ]", log) is not None


def wait_until_listening(log_path: Path, socket: Path | str, process: subprocess.Popen,
                         timeout: float) -> None:
    """Return once the log at `log_path` says the scheduler listens on `socket`; NotListening
    if `process` (the scheduler, or what runs it) exits first or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while not says_listening(_read(log_path), socket):
        if process.poll() is not None:
            raise NotListening(f"gemshare-scheduler exited with status {process.returncode} "
                               f"before listening on {socket}:\n{_read(log_path)}")
        if time.monotonic() > deadline:
            raise NotListening(f"gemshare-scheduler did not say it listens on {socket} within "
                               f"{timeout:g} s:\n{_read(log_path)}")
        time.sleep(POLL_S)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
