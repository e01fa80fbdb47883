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
# The node's root and the control group: ten times as much, so that the administrator's own
# programs are rarely held back, and a busy pair of them cannot fill the disk (one logged
# 200 KB a second, 13.9 MB in one benchmark run).
PRIVILEGED_SHARE = 10
PRIVILEGED_MARK = " (root or the control group)"


def privileged(key: str) -> str:
    """The key of a peer that is the node's root or of the control group."""
    return key + PRIVILEGED_MARK


@dataclass
class TokenBucket:
    """`burst` at once, then `rate` a second on average: what one peer may do of something
    (here: cause log lines; connect_rate.py: open connections)."""
    burst: float
    rate: float
    tokens: float
    at: float  # when `tokens` was last brought up to date

    @classmethod
    def full(cls, burst: float, rate: float, now: float) -> TokenBucket:
        return cls(burst, rate, burst, now)

    def take(self, now: float) -> bool:
        """Whether there is a token for one more now; it is spent if so."""
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False

    def whole(self, now: float) -> bool:
        """Whether it has refilled to its burst by `now`."""
        return self.tokens + (now - self.at) * self.rate >= self.burst


@dataclass
class _Budget:
    bucket: TokenBucket
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
            share = PRIVILEGED_SHARE if peer.endswith(PRIVILEGED_MARK) else 1
            budget = self._budgets[peer] = _Budget(
                TokenBucket.full(self.burst * share, self.rate * share, now), now)
        if budget.bucket.take(now):
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
                    "%g a second)", budget.left_out, peer, now - budget.since,
                    budget.bucket.burst, budget.bucket.rate)
                budget.left_out, budget.since = 0, now
            if everything or budget.bucket.whole(now):
                del self._budgets[peer]
