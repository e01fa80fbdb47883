"""The node-identity service: the container runtime's and the kubelet's sockets, in a container
of their own beside the scheduler's, behind one question (identity_wire.py).

The scheduler reads a program's cgroup and asks here which pod and container that is and what
the kubelet allocated it, and every few seconds what all the node's containers hold of each GPU
(core/rules/unheld.py); nothing else of the CRI (create, exec, remove) or of the kubelet is
reachable through it. It answers only its own user (the scheduler's pod runs both as root) on a
socket in a directory the two containers share and no other pod mounts.

Blocking, a thread per question (at most MAX_QUESTIONS at once), each answered within node.py's
deadlines. `readiness()` says whether the sockets it was given are there: a runtime's socket
that is missing (k3s and RKE2 keep theirs elsewhere) makes the scheduler's pod not ready,
rather than leave every program in a pod unnamed in silence.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import threading

from .identity_wire import AskHeldUnits, answer, held_answer, read_line, read_question
from .node import DEFAULT_CRI_SOCKETS, NodeLookup

log = logging.getLogger("gemshare-node-identity")

MAX_QUESTIONS = 8  # asked at once; the scheduler asks from LOOKUP_THREADS (4) threads
QUESTION_TIMEOUT_S = 2.0  # for the question to arrive, and the answer to leave
PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class IdentityServer:
    """Answers on `listener` (a bound, listening Unix socket) from `lookup`."""

    def __init__(self, listener: socket.socket, lookup: NodeLookup,
                 allowed_uid: int | None = None):
        self.listener = listener
        self.lookup = lookup
        self.allowed_uid = os.geteuid() if allowed_uid is None else allowed_uid
        self.answered = 0  # questions of who a container is
        self.listed = 0  # and of what the node's containers hold (the scheduler's reading)
        self._slots = threading.BoundedSemaphore(MAX_QUESTIONS)
        self._stopping = threading.Event()

    def readiness(self) -> str | None:
        """Why the scheduler's pod is not ready, or None: a socket given that is not there."""
        missing = self.lookup.missing()
        if self.lookup.cri is None:
            missing.insert(0, f"none of {' and '.join(DEFAULT_CRI_SOCKETS)} exists (the "
                              "container runtime's socket; --cri-socket names another)")
        return "; ".join(missing) or None

    def serve(self) -> None:
        """Answer until stop(); each question in a thread of its own."""
        self.listener.settimeout(0.5)  # to see stop() between connections
        while not self._stopping.is_set():
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if self._stopping.is_set():
                    return
                log.warning("accepting a question failed: %s", exc.strerror or exc)
                self._stopping.wait(0.1)
                continue
            if not self._slots.acquire(blocking=False):
                sock.close()  # the scheduler asks again: a full service holds nothing up
                continue
            threading.Thread(target=self._answer, args=(sock,), daemon=True,
                             name="question").start()

    def stop(self) -> None:
        self._stopping.set()

    def _answer(self, sock: socket.socket) -> None:
        try:
            with sock:
                sock.settimeout(QUESTION_TIMEOUT_S)
                uid = PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                      PEERCRED.size))[1]
                if uid not in (0, self.allowed_uid):
                    log.warning("refused a question of uid %d: only the scheduler's user "
                                "(uid %d) is answered", uid, self.allowed_uid)
                    return
                try:
                    asked = read_question(read_line(sock))
                except ValueError as exc:
                    log.warning("refused a question: %s", exc)
                    return
                if isinstance(asked, AskHeldUnits):
                    sock.sendall(held_answer(*self.lookup.held_units()))
                    self.listed += 1
                    return
                identity, problem = self.lookup.identify(asked)
                sock.sendall(answer(identity, problem))
                self.answered += 1
        except OSError as exc:
            log.info("a question went unanswered: %s", exc.strerror or exc)
        finally:
            self._slots.release()

