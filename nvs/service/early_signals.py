"""Signals that come while the scheduler is still starting.

Importing the scheduler's libraries takes a while (a few tenths of a second, longer on a busy
machine), and reading its files may too. A SIGHUP, SIGUSR1 or SIGUSR2 then, left to its default
action, would kill it: `hold` is called first thing, and keeps them until the server is ready,
when `replay` sends them again to the handlers now in place (a reload, a status line). SIGTERM
and SIGINT keep their usual action meanwhile: they end a start at once, before the socket exists.

Before `hold`, the interpreter itself starts: every installed command starts it through a
launcher that blocks the three before the exec (launcher/: hold-signals for make install, make
scheduler and the image; a wheel's gemshare-scheduler is one itself), so that one sent then
stays pending. `hold` unblocks them once its handler is in place, and those pending are kept as
any other. `python -m` has no launcher: a signal during the interpreter's start still kills it.
"""

from __future__ import annotations

import signal

HELD = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_pending: list[int] = []


def _keep(signum: int, frame) -> None:
    if signum not in _pending:  # two SIGHUPs before the start are one reload after it
        _pending.append(signum)


def hold() -> None:
    for signum in HELD:
        signal.signal(signum, _keep)
    # Blocked by hold-signals, and inherited by every thread and program started later.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)


def replay() -> list[int]:
    """Raise again the signals that came while held, in their order; which they were. Call it
    once the handlers that act on them are in place."""
    came, _pending[:] = list(_pending), []
    for signum in came:
        signal.raise_signal(signum)
    return came
