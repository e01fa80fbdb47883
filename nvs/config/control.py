"""Control requests (CONTROL frames, JSON): which operation, and whether its values are valid.

Validation happens before anything changes, so a request with one bad value applies nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .layers import LIVE
from ..core.model.terms import START_TERMS
from .parsing import SETTING_CHECKS, TERM_CHECKS
from .settings import WholeNumber, shortened, shown

OPERATIONS = ("status", "set", "client", "reload")
# Operations that change something: only root and the control group may ask for them.
CHANGES = ("set", "client", "reload")
SET_KEYS = LIVE
# Limits a client may be given "no limit" (null) for, over what a config rule says.
LIFTABLE = ("gpu_limit", "memory_limit")
# Terms gemsharectl may change on a running client: those taken at start stand until it exits.
CLIENT_TERM_CHECKS = {key: check for key, check in TERM_CHECKS.items() if key not in START_TERMS}
PID = WholeNumber("pid", 1, 1 << 22)  # the kernel's largest pid_max
# When the sender stops waiting for the reply, in DEADLINE_CLOCK milliseconds: a request still
# unapplied then is dropped, so that a change reported as failed never happens later. The
# monotonic clock is the machine's, the same in every process, and never steps.
DEADLINE_KEY = "deadline_ms"
DEADLINE_CLOCK = time.CLOCK_MONOTONIC
DEADLINE = WholeNumber(DEADLINE_KEY, 0, (1 << 63) - 1)
# A sender's deadline comes this share of its wait before it gives up (at most the cap): room
# for the reply to reach it, and for it to be read, when either machine side is busy.
DEADLINE_MARGIN_SHARE = 4
DEADLINE_MARGIN_MAX_MS = 1000


class Refused(Exception):
    """A control request that gets `{"ok": false, ...}`; `code` is permission, invalid,
    protocol or expired."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code

    def reply(self) -> dict:
        return {"ok": False, "code": self.code, "error": str(self)}


@dataclass(frozen=True)
class SetRequest:
    values: dict  # setting -> checked value
    clear: bool  # drop gemsharectl's earlier changes first


@dataclass(frozen=True)
class ClientRequest:
    pid: int
    values: dict  # term -> checked value; None lifts a limit
    reset: bool  # drop the client's earlier overrides first


def now_ms() -> int:
    """The deadline clock's time now."""
    return time.clock_gettime_ns(DEADLINE_CLOCK) // 1_000_000


def sender_deadline(wait_seconds: float) -> int:
    """The deadline to send with a request whose sender waits `wait_seconds` for the reply
    from now: a margin before it gives up, so that a change is either applied in time for its
    reply to be read, or not at all."""
    wait_ms = int(wait_seconds * 1000)
    return now_ms() + wait_ms - min(wait_ms // DEADLINE_MARGIN_SHARE, DEADLINE_MARGIN_MAX_MS)


def take_deadline(body: dict) -> int | None:
    """Remove the request's deadline from `body` and return it (None when it has none, as
    requests from older senders do); Refused when it is not a whole number."""
    if DEADLINE_KEY not in body:
        return None
    try:
        return DEADLINE.check(body.pop(DEADLINE_KEY))
    except ValueError as exc:
        raise Refused("invalid", f"{exc}; nothing was changed") from None


def check_deadline(deadline: int | None, op: str) -> None:
    """Refused ("expired") when the sender has given up on the request already."""
    if deadline is None:
        return
    late = now_ms() - deadline
    if late > 0:
        raise Refused("expired", f"the {op} request arrived or was reached {late} ms after "
                                 "its sender stopped waiting; it was dropped, nothing was "
                                 "changed")


def operation(body: dict) -> str:
    op = body.get("op")
    if op not in OPERATIONS:
        named = ", ".join(f'"{name}"' for name in OPERATIONS[:-1])
        raise Refused("protocol", f"unknown control op {shown(op)}: use {named} or "
                                  f'"{OPERATIONS[-1]}"')
    return op


def _only(body: dict, op: str, keys) -> None:
    unknown = sorted(set(body) - {"op", *keys})
    if unknown:
        named = ", ".join(shortened(key) for key in unknown[:3])
        more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
        takes = f"accepts only {', '.join(keys)}" if keys else "takes nothing besides op"
        raise Refused("invalid", f"{op} {takes}, not {named}{more}; nothing was changed")


def _flag(body: dict, key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise Refused("invalid", f"{key} must be true or false, not {shown(value)}; nothing "
                                 "was changed")
    return value


def _checked(body: dict, checks: dict, liftable=()) -> dict:
    try:
        return {key: None if body[key] is None and key in liftable else check(body[key])
                for key, check in checks.items() if key in body}
    except ValueError as exc:
        raise Refused("invalid", f"{exc}; nothing was changed") from None


def parse_set(body: dict) -> SetRequest:
    """The settings a `set` request changes, or Refused."""
    _only(body, "set", (*SET_KEYS, "clear"))
    clear = _flag(body, "clear")
    if not clear and not any(key in body for key in SET_KEYS):
        raise Refused("invalid", "set needs tq, anti_thrash or both (min_slice_ms and clear "
                                 "are taken too); nothing was changed")
    return SetRequest(_checked(body, {key: SETTING_CHECKS[key] for key in SET_KEYS}), clear)


def parse_client(body: dict) -> ClientRequest:
    """The terms a `client` request gives one client (by pid), or Refused."""
    started = [key for key in START_TERMS if key in body]
    if started:
        raise Refused("invalid", f"{', '.join(started)} is taken when a program starts; give it "
                                 "in a config rule for the program's next start; nothing was "
                                 "changed")
    _only(body, "client", ("pid", *CLIENT_TERM_CHECKS, "reset"))
    pid = _checked(body, {"pid": PID.check}).get("pid")
    if pid is None:
        raise Refused("invalid", "client needs the pid of a connected client; nothing was "
                                 "changed")
    reset = _flag(body, "reset")
    values = _checked(body, CLIENT_TERM_CHECKS, LIFTABLE)
    if not values and not reset:
        raise Refused("invalid", f"client needs {', '.join(CLIENT_TERM_CHECKS)} or reset; "
                                 "nothing was changed")
    return ClientRequest(pid, values, reset)


def parse_reload(body: dict) -> None:
    _only(body, "reload", ())
