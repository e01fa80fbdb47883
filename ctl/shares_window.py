"""Each client's share of GPU time over the last minute, from successive status polls.

The scheduler reports only a running total per client (`hold_time_s`, a running hold included).
A share is how much that total grew between two polls over the wall time between them; keeping
the polls of the last minute gives a share that neither jumps with every grant nor remembers an
hour-old burst. Pure arithmetic: the caller brings the clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

WINDOW_S = 60.0


@dataclass(frozen=True)
class Poll:
    at: float  # seconds on the caller's monotonic clock
    hold_times: dict  # client id -> hold_time_s


def hold_times(status: dict) -> dict:
    """Client id -> hold_time_s, for the clients whose status carries both."""
    held = {}
    for client in status.get("clients") or []:
        if not isinstance(client, dict):
            continue
        cid, seconds = client.get("id"), client.get("hold_time_s")
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and cid is not None:
            held[cid] = float(seconds)
    return held


class ShareWindow:
    """The polls of the last `window_s` seconds, and the shares they give."""

    def __init__(self, window_s: float = WINDOW_S):
        if window_s <= 0:
            raise ValueError(f"the window must be longer than 0 s, not {window_s}")
        self.window_s = window_s
        self._polls: deque[Poll] = deque()

    def add(self, at: float, hold_times: dict) -> None:
        if self._polls and at <= self._polls[-1].at:
            raise ValueError(f"polls must come in time order: {at} after {self._polls[-1].at}")
        self._polls.append(Poll(at, dict(hold_times)))
        # The oldest poll kept is the baseline, so one at or just inside the window's start stays.
        while len(self._polls) > 2 and self._polls[1].at <= at - self.window_s:
            self._polls.popleft()

    @property
    def polls(self) -> int:
        return len(self._polls)

    def span_s(self) -> float:
        """The wall time the shares are taken over now (0 before the second poll)."""
        return self._polls[-1].at - self._polls[0].at if len(self._polls) > 1 else 0.0

    def share(self, client_id) -> float | None:
        """Its share of GPU time in the window, 0 to 1; None until it has been seen twice."""
        if len(self._polls) < 2 or client_id not in self._polls[-1].hold_times:
            return None
        newest = self._polls[-1]
        # A client that connected inside the window is measured from the first poll that saw it.
        first = next(poll for poll in self._polls if client_id in poll.hold_times)
        if first is newest:
            return None
        grown = newest.hold_times[client_id] - first.hold_times[client_id]
        # Poll latency makes the scheduler's and this clock's intervals differ by milliseconds,
        # so a client holding throughout can come out a hair above 1.
        return min(1.0, max(0.0, grown / (newest.at - first.at)))

    def shares(self) -> dict:
        """Client id -> share (None while warming up), for every client of the newest poll."""
        if not self._polls:
            return {}
        return {cid: self.share(cid) for cid in self._polls[-1].hold_times}
