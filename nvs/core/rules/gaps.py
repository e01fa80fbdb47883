"""How long each client's idle gaps last, and whether one is worth lending: pure arithmetic on
times given by the caller (the policy core's clock).

A gap runs from a client's last work on a device to its next request there. The policy sees its
end (REQUEST_LOCK) but not its start: libnvs releases the lock early (RELEASE_IDLE) once nothing
was submitted for its idle time, so a gap's start is the release less that idle time, as the
scheduler's hint set it (IDLE_HINT), or libnvs's default where no hint bounded it. A gap with no
early release (a holder that kept the lock through it) is not seen at all, so an estimate comes
only from programs that let go; one that never does keeps today's turns.

Each client's gaps on each device are a moving average, each new gap weighing 1/2 as the move
rates do (cost.py): a program whose pattern changes (its gaps stop) is followed within a few
gaps. What a loan is weighed against is the smaller of that average and the last gap: one long
gap (a program's start, a checkpoint) must not make the short ones after it look long enough to
lend (on an H100, a pair with 0.2 s gaps lent two of them after a first gap of 1.5 s).
"""

from __future__ import annotations

from dataclasses import dataclass

from .cost import CHEAP_SWITCH_S, DEFAULT_IDLE_RELEASE_MS

# Longer gaps count as this long: past a quantum the holder's turn is over anyway, and one gap
# of an hour (a notebook left alone) must not make every later short one look long.
MAX_GAP_S = 60.0


def idle_waited_s(hint_ms: int) -> float:
    """How long a client released early had been idle: its hinted idle time, or libnvs's own
    default where the hint left it that (0). A floor hint is counted once although libnvs may
    wait up to twice as long: the gap then errs short, the side on which nothing is lent."""
    return (hint_ms or DEFAULT_IDLE_RELEASE_MS) / 1000


def worth_lending(gap_s: float | None, loan_s: float) -> bool:
    """Whether a holder whose gaps last `gap_s` (None: never seen) should hand its device to the
    waiter during one, when lending and coming back move memory for `loan_s` seconds: the gap
    must outlast every move (the waiter's memory in, the room for it out, and the same again on
    the way back); else the holder keeps its turn, as before. A handoff that moves nothing is
    left to the cheap hint (cost.idle_release_ms)."""
    return gap_s is not None and loan_s >= CHEAP_SWITCH_S and gap_s > loan_s


@dataclass
class Away:
    """An early release not yet followed by a request: when it came and how long the client had
    been idle then."""
    released_at: float
    idle_s: float


class Gaps:
    """Every client's gap estimate, by (client, device)."""

    def __init__(self) -> None:
        self._estimates: dict[tuple[int, int], float] = {}
        self._last: dict[tuple[int, int], float] = {}
        self._away: dict[tuple[int, int], Away] = {}

    def released_idle(self, cid: int, device: int, now: float, idle_s: float) -> None:
        self._away[(cid, device)] = Away(now, idle_s)

    def requested(self, cid: int, device: int, now: float) -> float | None:
        """The client asks again: the gap that ended now, if it began with an early release;
        it is counted into the estimate."""
        away = self._away.pop((cid, device), None)
        if away is None:
            return None
        gap = min(max(now - away.released_at, 0.0) + away.idle_s, MAX_GAP_S)
        key = (cid, device)
        old = self._estimates.get(key)
        self._estimates[key] = gap if old is None else (old + gap) / 2
        self._last[key] = gap
        return gap

    def expected(self, cid: int, device: int) -> float | None:
        """The client's usual gap on the device; None before one was seen."""
        return self._estimates.get((cid, device))

    def lendable(self, cid: int, device: int) -> float | None:
        """The gap a loan of the client's device is weighed against: its usual gap, or its last
        one if shorter; None before one was seen."""
        usual = self._estimates.get((cid, device))
        return None if usual is None else min(usual, self._last[(cid, device)])

    def of_client(self, cid: int) -> dict[int, float]:
        """Device -> the client's usual gap there, where one was seen."""
        return {device: gap for (owner, device), gap in self._estimates.items() if owner == cid}

    def forget(self, cid: int) -> None:
        for table in (self._estimates, self._last, self._away):
            for key in [key for key in table if key[0] == cid]:
                del table[key]
