"""How the policy core writes what it logs and reports: client text made safe, any text escaped
for a log line, lists, and why a hold ended (the reasons status and metrics name)."""

from __future__ import annotations

# Why a hold ended, as status names it: the drop's reason, or how it ended without one.
QUANTUM, SHARE, GPU_LIMIT, MEMORY, MODE = "quantum", "share", "gpu_limit", "memory", "mode"
IDLE, RELEASED, REVOKED, GONE = "idle", "released", "revoked", "disconnected"
GAP = "gap"  # it filled another's idle gap, and that one came back
HOLD_ENDINGS = (QUANTUM, SHARE, GPU_LIMIT, MEMORY, MODE, GAP, IDLE, RELEASED, REVOKED, GONE)


_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escaped(text: str) -> str:
    """`text` with every character that is not printable (a newline, a tab, an escape sequence's
    ESC) written as its escape, as Python writes it: a line of a log with it stays one line,
    and can forge no other."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def _escape(ch: str) -> str:
    code = ord(ch)
    if ch in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[ch]
    return f"\\x{code:02x}" if code < 0x100 else \
        f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str, limit: int = 256) -> str:
    """Client-supplied text made safe for one log line and for status."""
    return "".join(ch if ch.isprintable() else "?" for ch in text[:limit])


def mib(count: int) -> str:
    """A byte count in whole MiB, for a log line."""
    return f"{count / (1 << 20):.0f} MiB"


def listed(indices: list[int]) -> str:
    return ", ".join(map(str, indices))
