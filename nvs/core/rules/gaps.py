"""How long each client's idle gaps last, and whether one is worth lending: pure arithmetic on
times given by the caller (the policy core's clock).

A gap runs from a client's last work on a device to its next request there. The policy sees its
end (REQUEST_LOCK) and, when the client lets the lock go early (RELEASE_IDLE), its start: the
release less the idle time the client says it had (LOCK_RELEASED's idle_us), or, where it says
none, the idle time the scheduler's hint asked for (IDLE_HINT) or libnvs's default; never more
than the hold the scheduler saw end there (idle_waited_s). A gap with no
early release (a holder that kept the lock through it) is not seen at all, so an estimate comes
only from programs that let go.

Each client's gaps on each device are a moving average, each new gap weighing 1/2 as the move
rates do (cost.py): a program whose pattern changes (its gaps stop) is followed within a few
gaps. What a loan is weighed against is the median of its last three gaps (the shorter of the
two, or the one, before it had three): one long gap (a program's start, a checkpoint) must not
make the short ones after it look long enough to lend (on an H100, a pair with 0.2 s gaps lent
two of them after a first gap of 1.5 s), and one short gap (a notebook's cell that ran late,
leaving less time before its next one) must not stop the loans of a program whose gaps are
long.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from .cost import CHEAP_SWITCH_S, DEFAULT_IDLE_RELEASE_MS

# Longer gaps count as this long: past a quantum the holder's turn is over anyway, and one gap
# of an hour (a notebook left alone) must not make every later short one look long.
MAX_GAP_S = 60.0
RECENT_GAPS = 3  # the gaps a loan is weighed against
# A client idle this many times its usual gap has stopped its pattern (its user went away): its
# memory is the first to leave a device, whatever its gaps used to be.
STALE_GAPS = 2.0


def idle_waited_s(hint_ms: int, reported_us: int = 0, held_s: float = MAX_GAP_S) -> float:
    """How long a client released early had been idle: what it reported (LOCK_RELEASED's
    idle_us, protocol 8), else its hinted idle time, or libnvs's own default where the hint left
    it that (0); never longer than the hold the scheduler saw (`held_s`). A client can have
    been idle only while it held the device, so its word may shorten the estimate, never
    lengthen it past what was observed: one that claims a minute's idleness after 50 ms does
    not make its gaps look worth lending."""
    said = reported_us / 1e6 if reported_us > 0 else (hint_ms or DEFAULT_IDLE_RELEASE_MS) / 1000
    return max(min(said, held_s, MAX_GAP_S), 0.0)


def worth_lending(gap_s: float | None, loan_s: float) -> bool:
    """Whether a holder whose gaps last `gap_s` (None: never seen) should hand its device to the
    waiter during one, when lending and coming back move memory for `loan_s` seconds: a gap
    never seen is lent (nobody waits behind an idle holder for want of knowing it), and one seen
    must outlast every move (the waiter's memory in, the room for it out, and the same again on
    the way back); else the holder keeps its turn through its gaps, so that programs whose gaps
    are shorter than the moves do not swap memory at every gap. A handoff that moves nothing is
    left to the cheap hint (cost.idle_release_ms)."""
    return loan_s >= CHEAP_SWITCH_S and (gap_s is None or gap_s > loan_s)


def eviction_rank(now: float, idle_since: float | None, usual_gap: float | None) -> tuple:
    """Where a client idle since `idle_since` (None: not known) with gaps of `usual_gap` (None:
    none seen) stands among those whose memory may leave a device: the lowest leaves first.

    First the clients idle past STALE_GAPS of their usual gap, or of unknown pattern, the
    longest idle first (recency: a notebook left alone goes before one in use); then the others,
    the one expected to need the device last first (its gap's start plus its usual gap). Among
    programs that take turns at a steady pace, that keeps on the device the memory of those
    about to run, where evicting the longest idle would evict the next to run every time."""
    if idle_since is None:
        return (0, float("-inf"))
    if usual_gap is None or now - idle_since > STALE_GAPS * usual_gap:
        return (0, idle_since)
    return (1, -(idle_since + usual_gap))


@dataclass
class Away:
    """An early release not yet followed by a request: when it came and how long the client had
    been idle then."""
    released_at: float
    idle_s: float

    @property
    def since(self) -> float:
        return self.released_at - self.idle_s


class Gaps:
    """Every client's gap estimate, by (client, device)."""

    def __init__(self) -> None:
        self._estimates: dict[tuple[int, int], float] = {}
        self._recent: dict[tuple[int, int], tuple[float, ...]] = {}  # its last RECENT_GAPS
        self._away: dict[tuple[int, int], Away] = {}
        self._held_until: dict[tuple[int, int], float] = {}  # the end of its last hold

    def released_idle(self, cid: int, device: int, now: float, idle_s: float) -> None:
        self._away[(cid, device)] = Away(now, idle_s)

    def hold_ended(self, cid: int, device: int, now: float) -> None:
        self._held_until[(cid, device)] = now

    def held_until(self, cid: int, device: int) -> float | None:
        """When the client's last hold on the device ended; None if it never held it."""
        return self._held_until.get((cid, device))

    def idle_since(self, cid: int, device: int) -> float | None:
        """When the client's work on the device last ended, as far as is known: the start of
        the gap its early release began, else the end of its last hold; None if it never held
        the device."""
        away = self._away.get((cid, device))
        return away.since if away is not None else self._held_until.get((cid, device))

    def rank(self, cid: int, device: int, now: float) -> tuple:
        """Its place among the clients whose memory may leave the device (eviction_rank)."""
        return eviction_rank(now, self.idle_since(cid, device), self.expected(cid, device))

    def expected_back(self, cid: int, device: int, now: float) -> float | None:
        """When the client, idle in its usual pattern, is expected to ask for the device again
        (its gap's start plus its usual gap); None for one not idle in a pattern seen."""
        since, usual = self.idle_since(cid, device), self.expected(cid, device)
        if eviction_rank(now, since, usual)[0] == 0:  # no pattern, or idle past it
            return None
        return since + usual

    def rank_if_idle_from(self, cid: int, device: int, now: float) -> tuple:
        """Its place were its gap to begin now (a holder weighing whether to lend it)."""
        return eviction_rank(now, now, self.expected(cid, device))

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
        self._recent[key] = (*self._recent.get(key, ())[1 - RECENT_GAPS:], gap)
        return gap

    def expected(self, cid: int, device: int) -> float | None:
        """The client's usual gap on the device; None before one was seen."""
        return self._estimates.get((cid, device))

    def lendable(self, cid: int, device: int) -> float | None:
        """The gap a loan of the client's device is weighed against: the median of its last
        RECENT_GAPS gaps, the shortest while it has had fewer; None before one was seen."""
        recent = self._recent.get((cid, device))
        if not recent:
            return None
        return statistics.median(recent) if len(recent) == RECENT_GAPS else min(recent)

    def of_client(self, cid: int) -> dict[int, float]:
        """Device -> the client's usual gap there, where one was seen."""
        return {device: gap for (owner, device), gap in self._estimates.items() if owner == cid}

    def forget(self, cid: int) -> None:
        for table in (self._estimates, self._recent, self._away, self._held_until):
            for key in [key for key in table if key[0] == cid]:
                del table[key]
