"""`--metrics ADDR:PORT`: a small HTTP server for Prometheus, run by Trio beside the scheduler.

The socket is bound before the scheduler starts (tcp_address.bind), so that a taken or bad
address stops the start with a message naming it. Each scrape is answered by a task of the nursery that serves the
socket (no thread of its own: the metrics read the policy in the event loop, between events).

Peers that connect and say nothing, or a byte a second, must not keep Prometheus out (with a
`0.0.0.0` bind they may be anywhere on the network): a request's head must come whole within
HEAD_SECONDS, and when the connections served at once (MAX_SCRAPES, MAX_PER_PEER from one
address) are all taken, a new one takes the place of the oldest that has not sent its request
yet (scrape_slots.py). A scraper sends its request at once, so it is the slow ones that go.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

import trio
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from .scrape_slots import Scrape, ScrapeSlots
from .tcp_address import bound_address

log = logging.getLogger("gemshare.scheduler")

PATH = "/metrics"
READY_PATH = "/readyz"  # 503 with the reason while the scheduler is not ready
MAX_HEAD_BYTES = 8192  # a scrape's request line and headers are a few hundred bytes
HEAD_SECONDS = 2.0  # to send them, from connecting
ANSWER_SECONDS = 10.0  # then to take the whole answer
MAX_SCRAPES = 64  # connections served at once
MAX_PER_PEER = 16  # of them from one address


async def serve(sock: socket.socket, registry: CollectorRegistry,
                readiness: Callable[[], str | None] = lambda: None) -> None:
    """Answer scrapes on `sock` until cancelled, and READY_PATH from `readiness()` (None:
    ready; else why not); the socket is closed on the way out."""
    listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
    log.info("serving metrics on http://%s%s", bound_address(sock), PATH)
    slots = ScrapeSlots(MAX_SCRAPES, MAX_PER_PEER)
    async with listener, trio.open_nursery() as nursery:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:  # out of descriptors, for one: the scheduler goes on
                log.warning("metrics: accept failed (%s); retrying shortly", exc.strerror,
                            extra={"peer": "the metrics socket"})
                await trio.sleep(0.1)
                continue
            scrape = slots.admit(_peer_address(stream))
            if scrape is None:  # every slot answers a request: this one waits for none
                await trio.aclose_forcefully(stream)
                continue
            nursery.start_soon(_serve_one, stream, registry, readiness, slots, scrape)


def _peer_address(stream: trio.SocketStream) -> str:
    try:
        return str(stream.socket.getpeername()[0])
    except OSError:  # gone already
        return ""


async def _serve_one(stream: trio.SocketStream, registry: CollectorRegistry, readiness,
                     slots: ScrapeSlots, scrape: Scrape) -> None:
    try:
        with scrape.scope:
            await _answer(stream, registry, readiness, scrape)
    except Exception:  # a bug must cost one scrape, not the scheduler (nor flood the log)
        log.exception("metrics: internal error answering a scrape",
                      extra={"peer": f"metrics peer {scrape.peer}"})
    finally:
        slots.release(scrape)
        await trio.aclose_forcefully(stream)


async def _answer(stream: trio.SocketStream, registry: CollectorRegistry, readiness,
                  scrape: Scrape) -> None:
    head = None
    try:
        with trio.move_on_after(HEAD_SECONDS):
            head = await _read_head(stream)
        if head is None or not scrape.reading:
            return  # closed, too much, too slow
        scrape.reading = False  # from here on its slot is not given away
        with trio.move_on_after(ANSWER_SECONDS):
            await stream.send_all(_response(head, registry, readiness))
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass  # the scraper went away


async def _read_head(stream: trio.SocketStream) -> bytes | None:
    """The request up to its blank line; None when the peer closed or sent too much first.
    Cancelled when it is too slow."""
    head = b""
    while b"\r\n\r\n" not in head and b"\n\n" not in head:
        if len(head) > MAX_HEAD_BYTES:
            return None
        data = await stream.receive_some(4096)
        if not data:
            return None
        head += data
    return head


def _response(head: bytes, registry: CollectorRegistry, readiness) -> bytes:
    request = head.split(b"\n", 1)[0].split()
    if len(request) != 3:
        return _reply(400, "Bad Request", b"bad request line\n")
    method, target = request[0], request[1].split(b"?", 1)[0]
    if method not in (b"GET", b"HEAD"):
        return _reply(405, "Method Not Allowed", b"only GET\n", extra="Allow: GET, HEAD\r\n")
    if target == READY_PATH.encode():
        why = readiness()
        return _reply(200, "OK", b"ok\n", head_only=method == b"HEAD") if why is None else \
            _reply(503, "Service Unavailable", f"not ready: {why}\n".encode(),
                   head_only=method == b"HEAD")
    if target != PATH.encode():
        return _reply(404, "Not Found", f"the metrics are at {PATH}\n".encode())
    try:
        body = generate_latest(registry)
    except Exception:  # a bug in a report must not cost the scheduler
        log.exception("metrics: cannot render them", extra={"peer": "metrics scrapes"})
        return _reply(500, "Internal Server Error", b"cannot render the metrics\n")
    return _reply(200, "OK", body, CONTENT_TYPE_LATEST, head_only=method == b"HEAD")


def _reply(code: int, reason: str, body: bytes, content_type: str = "text/plain; charset=utf-8",
           extra: str = "", head_only: bool = False) -> bytes:
    head = (f"HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n{extra}\r\n")
    return head.encode() + (b"" if head_only else body)
