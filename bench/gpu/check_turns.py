"""Programs that take a step one at a time: each waits for a lock that the kernel lets go of
when the program holding it exits, so the next begins once the last has ended and freed its
memory (the notebooks' end check of every element, which needs memory beside the program's own:
two programs checking at once under a memory limit made the end's moves differ from one run to
the next, and with them the peak a limit was set from)."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

POLL_S = 0.05


def wait_turn(lock: Path, timeout_s: float) -> bool:
    """Takes `lock`, held until this process exits; False when others held it for `timeout_s`
    (the caller then goes on without its turn rather than hang)."""
    fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o600)  # left open: the lock goes with the process
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)
