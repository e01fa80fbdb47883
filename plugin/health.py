"""`--health ADDR:PORT`: what Kubernetes probes ask the plugin, answered from its own state.

- `/healthz` (liveness): 200 while the plugin's loop goes round (it does every poll interval,
  looking at the kubelet's directory and at NVML); 503 once it has not for `stuck_after`
  seconds, say because NVML hangs, so that the kubelet restarts the container.
- `/readyz` (readiness): 200 while the plugin serves each of its resources on its socket and
  has them all registered with the kubelet whose socket is there now; 503 with the reason
  otherwise (no kubelet, a refusal), naming the resource.

Answered by a small threaded HTTP server beside the plugin's loop (observe/probe_http.py of the
scheduler's package): the probes read two of the loop's attributes and never wait on it.
"""

from __future__ import annotations

import logging
import signal
import threading
import socket
import time

from gemshare_nvs.observe.probe_http import LIVENESS, READINESS, ProbeServer

from .lifecycle import Plugin

log = logging.getLogger("gemshare-device-plugin")

__all__ = ["LIVENESS", "READINESS", "HealthServer", "verdict"]
DEFAULT_STUCK_AFTER_S = 60.0


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


class HealthServer(ProbeServer):
    """The probes of `plugin` (or anything with its `last_round` and `readiness()`: the DRA
    driver) on a socket bound beforehand."""

    def __init__(self, sock: socket.socket, plugin: Plugin,
                 stuck_after: float = DEFAULT_STUCK_AFTER_S):
        super().__init__(sock, lambda path: verdict(plugin, path, stuck_after), log)


def serve_until_stopped(service, health_socket, log: logging.Logger) -> int:
    """Runs `service` (its `run(stop)`) until SIGTERM or SIGINT, its probes answered on
    `health_socket` meanwhile where one is given: the device plugin's and the DRA driver's
    main loop."""
    stop = threading.Event()

    def stop_on_signal(number, frame):
        log.info("stopping on %s", signal.Signals(number).name)
        stop.set()

    signal.signal(signal.SIGTERM, stop_on_signal)
    signal.signal(signal.SIGINT, stop_on_signal)
    probes = HealthServer(health_socket, service) if health_socket is not None else None
    if probes is not None:
        probes.start()
    try:
        service.run(stop)
    finally:
        if probes is not None:
            probes.stop()
    return 0
