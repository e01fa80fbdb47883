"""How much GPU time each client has had lately: lock-holding seconds, decayed exponentially.

A second held `age` seconds ago counts 2^(-age / HALF_LIFE_S). A client that held a lock
without a break for ever would have `SATURATED_S` = HALF_LIFE_S / ln 2 (about 43 s), so usage /
SATURATED_S is its recent fraction of the time. The half-life is long enough that a program's
pattern (a trainer busy all the time, a notebook busy for a fraction of a second now and then)
shows, and short enough that what it did a few minutes ago no longer counts.

Pure arithmetic on times given by the caller: the policy core's clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HALF_LIFE_S = 30.0
SATURATED_S = HALF_LIFE_S / math.log(2)


def _decay(seconds: float) -> float:
    return 2.0 ** (-max(seconds, 0.0) / HALF_LIFE_S)


@dataclass
class Meter:
    """One client's usage of one device. `value` is the usage at `at`; while `since` is set the
    client holds the lock, and the time from then on counts too."""
    value: float = 0.0
    at: float = 0.0
    since: float | None = None

    def read(self, now: float) -> float:
        """Usage at `now` (not before `at`)."""
        decay = _decay(now - self.at)
        held = SATURATED_S * (1.0 - decay) if self.since is not None else 0.0
        return self.value * decay + held

    def start(self, now: float) -> None:
        self.advance(now)
        self.since = now

    def stop(self, now: float) -> None:
        self.advance(now)
        self.since = None

    def charge(self, seconds: float, now: float) -> None:
        """Count `seconds` more at `now`, never past saturation (checks/throttle.py's charges)."""
        self.advance(now)
        self.value = min(self.value + max(seconds, 0.0), SATURATED_S)

    def advance(self, now: float) -> None:
        """Fold the time up to `now` into `value`: the same usage, read from a later `at`."""
        self.value, self.at = self.read(now), max(now, self.at)

    def falls_to(self, level: float, now: float) -> float:
        """When usage, not holding, is down to `level`: `now` if it already is; inf while
        holding."""
        current = self.read(now)
        if current <= level:
            return now
        if level <= 0.0 or self.since is not None:
            return math.inf
        return now + HALF_LIFE_S * math.log2(current / level)

    def reaches(self, level: float, now: float) -> float:
        """When usage, holding on, is up to `level`: `now` if it already is; inf if it never
        gets there (it does not hold, or the level is out of reach)."""
        current = self.read(now)
        if current >= level:
            return now
        if level >= SATURATED_S or self.since is None:
            return math.inf
        # SATURATED - (SATURATED - current) * decay(t) = level
        return now + HALF_LIFE_S * math.log2((SATURATED_S - current) / (SATURATED_S - level))


class Usage:
    """Every client's meters, by (client, device)."""

    def __init__(self) -> None:
        self._meters: dict[tuple[int, int], Meter] = {}

    def meter(self, cid: int, device: int) -> Meter:
        return self._meters.setdefault((cid, device), Meter())

    def read(self, cid: int, device: int, now: float) -> float:
        meter = self._meters.get((cid, device))
        return meter.read(now) if meter is not None else 0.0

    def of_client(self, cid: int, now: float) -> dict[int, float]:
        """Device -> usage, for the devices the client has used."""
        return {device: meter.read(now) for (owner, device), meter in self._meters.items()
                if owner == cid}

    def forget(self, cid: int) -> None:
        for key in [key for key in self._meters if key[0] == cid]:
            del self._meters[key]
