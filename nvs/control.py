"""Control requests (CONTROL frames, JSON): which operation, and whether a `set` is valid.

Validation happens before anything changes, so a request with one bad value applies nothing.
"""

from __future__ import annotations

from .protocol import Mode
from .settings import TQ, check_mode, shortened, shown

SET_KEYS = ("tq", "anti_thrash")


class Refused(Exception):
    """A control request that gets `{"ok": false, ...}`; `code` is permission, invalid or protocol."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code

    def reply(self) -> dict:
        return {"ok": False, "code": self.code, "error": str(self)}


def operation(body: dict) -> str:
    op = body.get("op")
    if op not in ("status", "set"):
        raise Refused("protocol", f"unknown control op {shown(op)}: use \"status\" or \"set\"")
    return op


def parse_set(body: dict) -> tuple[int | None, Mode | None]:
    """The new TQ and mode of a `set` request (None where not given), or Refused."""
    unknown = sorted(set(body) - {"op", *SET_KEYS})
    if unknown:
        named = ", ".join(shortened(key) for key in unknown[:3])
        more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
        raise Refused("invalid", f"set accepts only tq and anti_thrash, not {named}{more}; "
                                 "nothing was changed")
    if not any(key in body for key in SET_KEYS):
        raise Refused("invalid", "set needs tq, anti_thrash or both; nothing was changed")
    try:
        tq = TQ.check(body["tq"]) if "tq" in body else None
        mode = check_mode(body["anti_thrash"]) if "anti_thrash" in body else None
    except ValueError as exc:
        raise Refused("invalid", f"{exc}; nothing was changed") from None
    return tq, mode
