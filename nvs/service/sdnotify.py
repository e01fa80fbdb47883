"""The systemd notification protocol (sd_notify) without libsystemd.

systemd puts a datagram socket's address in NOTIFY_SOCKET: a path, or an abstract address written
with a leading '@'. Type=notify services send READY=1 there once they serve. With WatchdogSec=
in the unit, systemd also sets WATCHDOG_USEC (and WATCHDOG_PID) and expects WATCHDOG=1 more often
than that, else it kills the service (and Restart= starts it again).
"""

from __future__ import annotations

import os
import socket


def notify(state: str, environ=os.environ) -> bool:
    """Send `state` (e.g. "READY=1") if NOTIFY_SOCKET is set; True when sent.

    Raises OSError when the socket is named but cannot be reached, so the caller can log it.
    """
    address = environ.get("NOTIFY_SOCKET", "")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    elif not address.startswith("/"):
        raise OSError(f"NOTIFY_SOCKET={address!r} is neither a path nor an abstract address")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        sock.connect(address)
        sock.sendall(state.encode("utf-8"))
    return True


def watchdog_interval(environ=os.environ) -> float | None:
    """How often to send WATCHDOG=1, in seconds: half of WATCHDOG_USEC, as sd_watchdog_enabled(3)
    advises; None when systemd expects no pings from this process."""
    if not environ.get("NOTIFY_SOCKET"):
        return None
    pid = environ.get("WATCHDOG_PID")
    if pid and pid != str(os.getpid()):
        return None  # meant for the process that started us, not for us
    try:
        usec = int(environ.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    return usec / 2e6 if usec > 0 else None
