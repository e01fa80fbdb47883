"""How the policy core writes what it logs and reports: client text made safe, lists, and why a
hold ended (the reasons status and metrics name)."""

from __future__ import annotations

# Why a hold ended, as status names it: the drop's reason, or how it ended without one.
QUANTUM, SHARE, GPU_LIMIT, MEMORY, MODE = "quantum", "share", "gpu_limit", "memory", "mode"
IDLE, RELEASED, REVOKED, GONE = "idle", "released", "revoked", "disconnected"
GAP = "gap"  # it filled another's idle gap, and that one came back
HOLD_ENDINGS = (QUANTUM, SHARE, GPU_LIMIT, MEMORY, MODE, GAP, IDLE, RELEASED, REVOKED, GONE)


def printable(text: str, limit: int = 256) -> str:
    """Client-supplied text made safe for one log line and for status."""
    return "".join(ch if ch.isprintable() else "?" for ch in text[:limit])


def mib(count: int) -> str:
    """A byte count in whole MiB, for a log line."""
    return f"{count / (1 << 20):.0f} MiB"


def listed(indices: list[int]) -> str:
    return ", ".join(map(str, indices))
