"""Shares of GPU time: who may take the lock early, how long each turn lasts, and when a limited
client must pause. Pure arithmetic on usage (usage.py) and terms (terms.py), for the policy.

- Weighted usage is usage / weight: a client of weight 2 counts half as busy for the same time.
- A waiter whose weighted usage is clearly below a holder's (under UNDER_FACTOR of it) is owed
  the device: the holder is dropped once it has run a minimum slice, not at the end of its
  quantum. This is decided when the waiter asks. Two equally busy clients never trigger it: each
  asks just after its own turn, when its usage is at its highest, so they alternate every TQ.
- Under contention each turn lasts TQ scaled by the holder's weight against the heaviest
  contender's: weights 3 and 1 take turns of TQ and TQ / 3, so lock time goes 3:1 while nobody
  waits longer than a TQ per client ahead of it.
- The minimum slice grows with what a switch moves (SWITCH_MULTIPLE times the move time), so
  that short slices never spend more time moving memory than running.
- A gpu_limit L keeps a client's usage near L of the saturated usage: it is dropped when its
  usage reaches that level, even with nobody waiting, and granted again once its usage has fallen
  enough that it will run about LIMIT_TURN_S before reaching it again.
"""

from __future__ import annotations

from .usage import SATURATED_S

UNDER_FACTOR = 0.5
SWITCH_MULTIPLE = 4.0
LIMIT_TURN_S = 1.0


def weighted(usage: float, weight: float) -> float:
    return usage / weight


def clearly_under(waiter: float, holder: float) -> bool:
    """Whether a waiter's weighted usage is clearly below a holder's."""
    return waiter < UNDER_FACTOR * holder


def minimum_slice(min_slice_s: float, switch_seconds: float) -> float:
    """How long a holder runs before it may be preempted, given what the switch would move."""
    return max(min_slice_s, SWITCH_MULTIPLE * switch_seconds)


def turn_length(tq: float, weight: float, heaviest: float, floor: float) -> float:
    """A holder's quantum under contention: TQ for the heaviest weight there, less for lighter
    ones, never under `floor` (nor over TQ)."""
    return min(tq, max(tq * weight / max(heaviest, weight), floor))


def limit_levels(gpu_limit: float, turn_s: float = LIMIT_TURN_S) -> tuple[float, float]:
    """(stop, resume): the usage at which a client with this limit is dropped, and the usage
    below which it may be granted again. Near the stop level usage rises at about 1 - L while
    holding and falls at about L while not, so a turn of `turn_s` is followed by a pause of
    turn_s (1 - L) / L: held a fraction L of the time."""
    stop = gpu_limit * SATURATED_S
    return stop, max(stop - (1.0 - gpu_limit) * turn_s, 0.0)
