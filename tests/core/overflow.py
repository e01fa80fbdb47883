"""What the policy tells idle programs to get ready to move out: their share of the overflow."""

from __future__ import annotations

from gemshare_nvs.core.rules.cost import margin

M = 1 << 20
PAGE = 2 * M


def overflow_share(allocated: int, capacity: int, givers: int, reserve: int = 512 * M) -> int:
    """What each of `givers` programs may have to have off a device at once, by the room a
    grant asks for: what does not fit (with one context reserve and the margin), shared among
    them, in whole pages."""
    share = -(-(allocated + reserve + margin(capacity) - capacity) // givers)
    return -(-share // PAGE) * PAGE
