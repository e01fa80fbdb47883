"""A budget of log lines per peer: a program that misbehaves in a loop, or a local user who
connects and hangs up as fast as they can, must not flood the log (nor the journal's rate
limit, which would drop every other service's lines too).

A record takes part when it carries `peer` (logging's `extra={"peer": "uid 1000"}`), whatever
its level: the scheduler puts it on every line a peer's doing causes, keyed by the peer's uid,
since a uid is what one user cannot multiply. Each peer may cause `burst` lines at once and
then `rate` a second on average (a token bucket); the lines past that are counted, not
written, and one line says how many were left out, at `flush`, which the scheduler calls every
`report_seconds` and when it stops.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

BURST = 300  # lines one peer may cause at once
RATE = 10.0  # and after that, lines a second on average
REPORT_SECONDS = 60.0  # how often the lines left out are counted in the log


@dataclass
class _Budget:
    tokens: float
    at: float  # when `tokens` was last brought up to date
    since: float  # when the count of lines left out began
    left_out: int = 0


class PeerRateLimit(logging.Filter):
    def __init__(self, burst: int = BURST, rate: float = RATE,
                 report_seconds: float = REPORT_SECONDS, clock=time.monotonic):
        super().__init__()
        self.burst = burst
        self.rate = rate
        self.report_seconds = report_seconds
        self.clock = clock
        self._budgets: dict[str, _Budget] = {}
        self._logger = logging.getLogger("gemshare.scheduler")

    def filter(self, record: logging.LogRecord) -> bool:
        peer = getattr(record, "peer", None)
        if peer is None:
            return True
        now = self.clock()
        budget = self._budgets.get(peer)
        if budget is None:
            budget = self._budgets[peer] = _Budget(self.burst, now, now)
        budget.tokens = min(self.burst, budget.tokens + (now - budget.at) * self.rate)
        budget.at = now
        if budget.tokens >= 1:
            budget.tokens -= 1
            return True
        budget.left_out += 1
        return False

    def flush(self, everything: bool = False) -> None:
        """Say how many lines each peer had left out, and forget the peers whose budget is
        whole again (all of them when `everything`), so that the table stays small."""
        now = self.clock()
        for peer, budget in list(self._budgets.items()):
            if budget.left_out:
                # No `peer` on this line: it is never left out itself.
                self._logger.warning(
                    "suppressed %d lines caused by %s in the last %.0f s (past %d at once and "
                    "%g a second)", budget.left_out, peer, now - budget.since, self.burst,
                    self.rate)
                budget.left_out, budget.since = 0, now
            whole = budget.tokens + (now - budget.at) * self.rate >= self.burst
            if everything or whole:
                del self._budgets[peer]
