"""gemsharectl's requests to the scheduler, with every failure turned into a CtlError.

The protocol's control conversation is one CONTROL frame answered by one CONTROL_REPLY; this
module only adds the operator-facing wording and the exit status of each failure.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from gemshare_nvs import protocol
from gemshare_nvs.config import control
from gemshare_nvs.wire.connection import Connection, RefusedByScheduler, SchedulerUnavailable

from . import socket_access
from .errors import CtlError, ExitCode

_NOT_RUNNING = (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTDIR)
_FORBIDDEN = (errno.EACCES, errno.EPERM)
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes including the terminating NUL


def _connect(path: Path, timeout: float) -> Connection:
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise CtlError(f"the socket path {path} is {len(os.fsencode(path))} bytes long, but a Unix "
                       f"socket path has at most {MAX_SOCKET_PATH}: choose a shorter --socket",
                       ExitCode.INVALID)
    try:
        return Connection(path, timeout=timeout)
    except SchedulerUnavailable as exc:
        # Connection keeps the OSError it explained as the exception's context.
        cause = exc.__context__
        code = cause.errno if isinstance(cause, OSError) else None
        what = socket_access.not_a_socket(path)  # whatever the kernel said of it
        if code in _NOT_RUNNING or (code in _FORBIDDEN and what):
            raise CtlError(
                f"no gemshare-scheduler is listening on {path}{f' ({what})' if what else ''}. "
                f"Start it (for example 'sudo systemctl start gemshare-scheduler' or 'sudo "
                f"gemshare-scheduler'), or point --socket / GEMSHARE_SOCKET at the socket it "
                f"uses.", ExitCode.UNREACHABLE) from None
        if code in _FORBIDDEN:
            why = socket_access.permission_problem(path) or "this user may not reach it"
            raise CtlError(
                f"permission denied opening the scheduler socket {path}: {why}. Ask an "
                f"administrator for access to the socket and its directory, or run gemsharectl "
                f"as root.", ExitCode.PERMISSION) from None
        raise CtlError(str(exc), ExitCode.UNREACHABLE) from None


def _refusal(path: Path, reply: dict, refused: str) -> CtlError:
    code = reply.get("code")
    text = reply.get("error") or "no reason given"
    if code == "expired":
        return CtlError(f"the scheduler on {path} reached the request only after "
                        f"gemsharectl's --timeout: {text}. Check its log (journalctl -u "
                        "gemshare-scheduler), or retry with a longer --timeout.",
                        ExitCode.UNREACHABLE)
    if code == "permission":
        return CtlError(f"the scheduler on {path} refused: {text}", ExitCode.PERMISSION)
    if code == "invalid":
        return CtlError(f"the scheduler on {path} {refused}: {text}", ExitCode.INVALID)
    return CtlError(f"the scheduler on {path} could not carry out the request "
                    f"({code or 'no code'}): {text}", ExitCode.UNREACHABLE)


def request(path: Path, body: dict, timeout: float, refused: str = "refused the value") -> dict:
    """Send one control request; returns the reply if it says ok, else raises CtlError (whose
    message says the scheduler `refused` when it found the request invalid).

    The request carries a deadline a margin before this gives up waiting for the reply, so
    that a scheduler that reaches it later (stopped, overloaded) drops it instead of doing what
    was reported as failed, and one that applies it has the margin to get the reply here."""
    with _connect(path, timeout) as connection:
        try:
            deadline = control.sender_deadline(timeout)
            reply = connection.request({**body, control.DEADLINE_KEY: deadline})
        except RefusedByScheduler as exc:
            if exc.code != protocol.ErrorCode.PERMISSION:
                raise CtlError(f"{exc}. Check the scheduler's log (journalctl -u "
                               "gemshare-scheduler).", ExitCode.UNREACHABLE) from None
            raise CtlError(f"the scheduler on {path} refused: {exc.text}",
                           ExitCode.PERMISSION) from None
        except SchedulerUnavailable as exc:
            raise CtlError(f"{exc}. Check the scheduler's log (journalctl -u gemshare-scheduler).",
                           ExitCode.UNREACHABLE) from None
        except TimeoutError:
            raise CtlError(
                f"the scheduler on {path} did not answer within {timeout:g} s. It may be "
                f"overloaded or stuck: check its log (journalctl -u gemshare-scheduler), or "
                f"retry with a longer --timeout.",
                ExitCode.UNREACHABLE) from None
        except OSError as exc:
            raise CtlError(f"lost the connection to the scheduler on {path}: "
                           f"{exc.strerror or exc}", ExitCode.UNREACHABLE) from None
    if reply.get("ok") is not True:
        raise _refusal(path, reply, refused)
    return reply


def change_settings(path: Path, timeout: float, *, tq: int | None = None,
                    anti_thrash: str | None = None, min_slice_ms: int | None = None,
                    clear: bool = False) -> dict:
    """Set the time quantum, the anti-thrash mode and/or the min slice, after dropping the
    earlier changes when `clear`; returns the scheduler's reply."""
    body: dict = {"op": "set"}
    if clear:
        body["clear"] = True
    given = {"tq": tq, "anti_thrash": anti_thrash, "min_slice_ms": min_slice_ms}
    body.update((key, value) for key, value in given.items() if value is not None)
    return request(path, body, timeout)


def change_client(path: Path, timeout: float, pid: int, values: dict, reset: bool) -> dict:
    """Give the clients of process `pid` terms of their own (None lifts a limit)."""
    body = {"op": "client", "pid": pid, **values}
    if reset:
        body["reset"] = True
    return request(path, body, timeout)


def reload_config(path: Path, timeout: float) -> dict:
    return request(path, {"op": "reload"}, timeout, refused="did not reload its config file")


def read_status(path: Path, timeout: float) -> dict:
    """The scheduler's status object (see docs/protocol.md, STATUS)."""
    reply = request(path, {"op": "status"}, timeout)
    status = reply.get("status")
    if not isinstance(status, dict):
        raise CtlError(f"the scheduler on {path} answered a status request without a status "
                       f"object; are gemsharectl and the scheduler from the same release?",
                       ExitCode.UNREACHABLE)
    return status
