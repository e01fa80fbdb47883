"""SIGHUP, SIGUSR1 or SIGUSR2 sent to a scheduler in the first milliseconds after its exec, and
what a test checks of it: it serves and has acted on the signal (a reload, a status line).

Before a launcher's first instruction, while the kernel still completes the exec (tens of
microseconds after Popen returns), no program can keep a signal; so the first moment tried is
1 ms, and a start at 1 or 2 ms that died of it (the machine too busy to run it by then) is tried
once more. Without a launcher, Python's own start (20-40 ms) is where it dies.
"""

from __future__ import annotations

import signal
import time
from typing import Callable

HELD = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
# In ms after the exec: during the launcher, the interpreter's start and the imports.
MOMENTS_MS = (1, 2, 5, 10, 20, 50)
RETRIED_UP_TO_MS = 2
WAIT_S = 60.0  # only catches a hang


def said_of(signum: signal.Signals) -> str:
    return "(SIGHUP)" if signum == signal.SIGHUP else f"{signum.name} received: status"


def acted_on(running, *signals: signal.Signals) -> None:
    """It serves, has said so of each signal it was sent, and stops cleanly."""
    running.wait_until_accepting()
    for signum in signals:
        deadline = time.monotonic() + WAIT_S
        while said_of(signum) not in running.log():
            assert running.process.poll() is None, running.log()
            assert time.monotonic() < deadline, running.log()
            time.sleep(0.05)
    with running.connect() as control:
        assert control.request({"op": "status"})["ok"] is True
    assert running.stop() == 0


def died_of(running, signum: signal.Signals) -> bool:
    """Whether the signal killed it: known once it exits or has made its socket."""
    deadline = time.monotonic() + WAIT_S
    while running.process.poll() is None and not running.socket.exists() and \
            time.monotonic() < deadline:
        time.sleep(0.01)
    return running.process.poll() == -signum


def survives_every_moment(start: Callable[[], object], signum: signal.Signals) -> None:
    """`start()` starts a scheduler without waiting for it; at each moment, one is sent the
    signal and must act on it."""
    for after_ms in MOMENTS_MS:
        for attempt in range(2):
            running = start()
            time.sleep(after_ms / 1000)
            running.process.send_signal(signum)
            if attempt or after_ms > RETRIED_UP_TO_MS or not died_of(running, signum):
                break
        acted_on(running, signum)
