"""A TCP address to serve HTTP on (`--metrics ADDR:PORT`, the device plugin's `--health`): read
from the command line and bound, with messages that name the option and say what to do.
"""

from __future__ import annotations

import errno
import socket

BACKLOG = 16
PRIVILEGED_PORTS = 1024


class AddressError(Exception):
    """The address cannot be served; the message names it and says what to do."""


def parse_address(text: str) -> tuple[str, int]:
    """(host, port) from HOST:PORT or [IPV6]:PORT; port 0 takes any free port. ValueError
    says what is wrong."""
    host, colon, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"write an IPv6 address in brackets, as [{host}]:{port}")
    if not colon or not host:
        raise ValueError(f"expected ADDRESS:PORT such as 127.0.0.1:9410, not {text!r}")
    if not port.isascii() or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"the port must be a whole number from 0 to 65535, not {port!r}")
    return host, int(port)


def shown(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind(host: str, port: int, what: str, option: str) -> socket.socket:
    """A listening TCP socket on the address, for serving `what` as `option` asked; AddressError
    when it cannot be had."""
    where = f"cannot serve {what} on {shown(host, port)}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise AddressError(f"{where}: {exc.strerror}; give {option} an address of this "
                           "machine") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past a restart's TIME_WAIT
        sock.bind(address)
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise AddressError(f"{where}: {_advice(exc, host, port, option)}") from None
    return sock


def _advice(exc: OSError, host: str, port: int, option: str) -> str:
    if exc.errno == errno.EADDRNOTAVAIL:
        return (f"{host} is not an address of this machine; give {option} one of its own "
                f"(127.0.0.1:{port} for this machine alone, 0.0.0.0:{port} for every interface)")
    if exc.errno == errno.EADDRINUSE:
        return (f"{exc.strerror}: another program listens there; stop it or give {option} "
                "another address")
    if exc.errno == errno.EACCES and 0 < port < PRIVILEGED_PORTS:
        return (f"{exc.strerror}: ports below {PRIVILEGED_PORTS} need root; give {option} a "
                f"port from {PRIVILEGED_PORTS} up")
    return f"{exc.strerror}; give {option} another address"


def bound_address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return shown(host, port)
