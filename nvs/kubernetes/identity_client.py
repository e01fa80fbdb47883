"""The scheduler's side of the node-identity service: it asks the service's socket what it
would otherwise ask the container runtime and the kubelet itself (node.NodeLookup), so that its
own container mounts neither of their sockets.

Blocking, within a deadline, a connection per question (the service may restart between two):
lookups.py runs it off the event loop as it runs NodeLookup.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

from ..core.model.container import HeldUnits, NodeIdentity
from .cgroups import ContainerRef
from .identity_wire import held_question, question, read_answer, read_held_answer, read_line
from .node import is_socket

# The service asks the runtime, then the kubelet, each within node.CALL_TIMEOUT_S.
ANSWER_TIMEOUT_S = 2.2


class IdentityClient:
    def __init__(self, path: str, timeout_s: float = ANSWER_TIMEOUT_S):
        self.path = path
        self.timeout_s = timeout_s

    lists_units = True  # the service asks the kubelet (it says so when it has no socket)

    def identify(self, ref: ContainerRef) -> tuple[NodeIdentity | None, str]:
        """As NodeLookup.identify; a service that does not answer, or answers nonsense, leaves
        the container unnamed, saying why."""
        return self._ask(question(ref), read_answer)

    def held_units(self) -> tuple[tuple[HeldUnits, ...] | None, str]:
        """As NodeLookup.held_units; None, saying why, when the service does not answer."""
        return self._ask(held_question(), read_held_answer)

    def _ask(self, line: bytes, read: Callable[[bytes], tuple]) -> tuple:
        """The service's answer to `line`, as `read` reads it; (None, why) when it gives none."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self.timeout_s)
                sock.connect(self.path)
                sock.sendall(line)
                reply = read_line(sock)
            return read(reply)
        except (OSError, ValueError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else \
                str(exc) or exc.__class__.__name__
            return None, f"the node-identity service at {self.path} did not answer ({why})"

    def missing(self) -> list[str]:
        """The service's socket, in words, when it is not there now (readiness)."""
        return [] if is_socket(self.path) else \
            [f"the node-identity service's socket {self.path} is missing"]

    def status(self) -> dict:
        """The sockets asked, for status: the service's, none of the node's daemons."""
        return {"cri_socket": None, "pod_resources_socket": None,
                "node_identity_socket": self.path}

    def close(self) -> None:
        pass
