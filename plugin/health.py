"""`--health ADDR:PORT`: what Kubernetes probes ask the plugin, answered from its own state.

- `/healthz` (liveness): 200 while the plugin's loop goes round (it does every poll interval,
  looking at the kubelet's directory and at NVML); 503 once it has not for `stuck_after`
  seconds, say because NVML hangs, so that the kubelet restarts the container.
- `/readyz` (readiness): 200 while the plugin serves each of its resources on its socket and
  has them all registered with the kubelet whose socket is there now; 503 with the reason
  otherwise (no kubelet, a refusal), naming the resource.

Answered by a small threaded HTTP server beside the plugin's loop: the probes read two of the
loop's attributes and never wait on it.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .lifecycle import Plugin

log = logging.getLogger("gemshare-device-plugin")

LIVENESS = "/healthz"
READINESS = "/readyz"
DEFAULT_STUCK_AFTER_S = 60.0
REQUEST_TIMEOUT_S = 5.0


def verdict(plugin: Plugin, path: str, stuck_after: float) -> tuple[int, str]:
    """(HTTP status, one line) for a probe of `path`."""
    if path == LIVENESS:
        quiet = time.monotonic() - plugin.last_round
        if quiet > stuck_after:
            return 503, f"stuck: the plugin's loop has not gone round for {quiet:.0f} s"
        return 200, "ok"
    if path == READINESS:
        why = plugin.readiness()
        return (200, "ok") if why is None else (503, f"not ready: {why}")
    return 404, f"the probes are {LIVENESS} and {READINESS}"


class HealthServer:
    """Serves the probes on a socket bound beforehand (so a bad address stops the start)."""

    def __init__(self, sock: socket.socket, plugin: Plugin,
                 stuck_after: float = DEFAULT_STUCK_AFTER_S):
        class Handler(BaseHTTPRequestHandler):
            timeout = REQUEST_TIMEOUT_S  # a peer that says nothing holds a thread this long

            def do_GET(self):
                code, text = verdict(plugin, self.path.split("?", 1)[0], stuck_after)
                body = (text + "\n").encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format, *args):  # probes every few seconds: not news
                pass

        self._server = ThreadingHTTPServer(sock.getsockname()[:2], Handler,
                                           bind_and_activate=False)
        self._server.socket.close()
        self._server.socket = sock
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="health",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()
        host, port = self._server.socket.getsockname()[:2]
        log.info("answering probes on http://%s:%d%s and %s",
                 f"[{host}]" if ":" in host else host, port, LIVENESS, READINESS)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(REQUEST_TIMEOUT_S)
