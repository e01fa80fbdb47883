"""Kubernetes probes over HTTP (`/healthz`, `/readyz`), for the node daemons that answer them
from a thread: the device plugin, the DRA driver, the node-identity service.

A small threaded HTTP server on a socket bound beforehand (so that a bad address stops the
start); each probe is answered by `verdict(path)`, which must not wait on anything.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LIVENESS = "/healthz"
READINESS = "/readyz"
REQUEST_TIMEOUT_S = 5.0


class ProbeServer:
    """Serves `verdict(path) -> (HTTP status, one line)` on `sock`; says where in `log`."""

    def __init__(self, sock: socket.socket, verdict: Callable[[str], tuple[int, str]],
                 log: logging.Logger):
        class Handler(BaseHTTPRequestHandler):
            timeout = REQUEST_TIMEOUT_S  # a peer that says nothing holds a thread this long

            def do_GET(self):
                code, text = verdict(self.path.split("?", 1)[0])
                body = (text + "\n").encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format, *args):  # probes every few seconds: not news
                pass

        self._log = log
        self._server = ThreadingHTTPServer(sock.getsockname()[:2], Handler,
                                           bind_and_activate=False)
        self._server.socket.close()
        self._server.socket = sock
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="probes",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()
        host, port = self._server.socket.getsockname()[:2]
        self._log.info("answering probes on http://%s:%d%s and %s",
                       f"[{host}]" if ":" in host else host, port, LIVENESS, READINESS)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(REQUEST_TIMEOUT_S)
