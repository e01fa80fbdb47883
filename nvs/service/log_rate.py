"""At most a few warnings per peer per window: a program that misbehaves in a loop must not
flood the log (or the journal's rate limit, which would drop everyone else's lines too).

A record takes part when it carries `peer` (logging's `extra={"peer": "uid 1000"}`): past
`burst` such warnings from one peer within `window` seconds, its further ones are counted, not
written, and one line says how many were left out once the window is over (at the peer's next
warning, or at `flush`, which the scheduler calls periodically and when it stops).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

BURST = 10
WINDOW_SECONDS = 60.0


@dataclass
class _Window:
    start: float
    written: int = 0
    suppressed: int = 0


class PeerRateLimit(logging.Filter):
    def __init__(self, burst: int = BURST, window: float = WINDOW_SECONDS, clock=time.monotonic):
        super().__init__()
        self.burst = burst
        self.window = window
        self.clock = clock
        self._windows: dict[str, _Window] = {}
        self._logger = logging.getLogger("gemshare.scheduler")

    def filter(self, record: logging.LogRecord) -> bool:
        peer = getattr(record, "peer", None)
        if peer is None or record.levelno < logging.WARNING:
            return True
        now = self.clock()
        window = self._windows.get(peer)
        if window is None or now - window.start >= self.window:
            if window is not None:
                self._report(peer, window)
            window = self._windows[peer] = _Window(now)
        if window.written < self.burst:
            window.written += 1
            return True
        window.suppressed += 1
        return False

    def flush(self, everything: bool = False) -> None:
        """Report the peers whose window is over (all of them when `everything`) and forget
        them."""
        now = self.clock()
        for peer, window in list(self._windows.items()):
            if everything or now - window.start >= self.window:
                del self._windows[peer]
                self._report(peer, window)

    def _report(self, peer: str, window: _Window) -> None:
        if window.suppressed:
            # No `peer` on this line: it is never suppressed itself.
            self._logger.warning("suppressed %d similar lines from %s in %g s", window.suppressed,
                                 peer, self.window)
