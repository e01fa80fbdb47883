"""`--health`: the probes answer from the plugin's real state, and each can fail."""

from __future__ import annotations

import re
import signal
import socket
import time
import urllib.error
import urllib.request

import pytest
from fake_kubelet import FakeKubelet
from plugin_helpers import GIB, HOST_PATHS, wait_for_text

from gemshare_plugin.gpu_health import GpuHealth
from gemshare_plugin.health import HealthServer
from gemshare_plugin.lifecycle import Plugin
from gemshare_plugin.resources import family

WAIT_S = 15.0


def probe(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def probe_until(url: str, code: int, text: str | None = None) -> str:
    """The answer's text once the probe answers `code` (and `text`, when given)."""
    deadline = time.monotonic() + WAIT_S
    while (answer := probe(url))[0] != code or text not in (None, answer[1]):
        assert time.monotonic() < deadline, answer
        time.sleep(0.05)
    return answer[1]


@pytest.fixture
def serve_probes():
    servers = []

    def serve(plugin: Plugin, **options) -> str:
        sock = socket.create_server(("127.0.0.1", 0))
        server = HealthServer(sock, plugin, **options)
        server.start()
        servers.append(server)
        return f"http://127.0.0.1:{sock.getsockname()[1]}"

    yield serve
    for server in servers:
        server.stop()


def test_readiness_follows_the_registration_and_liveness_the_loop(
        kubelet_dir, plugin_factory, serve_probes):
    running = plugin_factory(kubelet_dir, slots=2)
    base = serve_probes(running.plugin)
    probe_until(f"{base}/readyz", 503,
                f"not ready: gemshare.io/gpu: no kubelet socket at {kubelet_dir}/kubelet.sock\n")
    assert probe(f"{base}/healthz") == (200, "ok\n")
    kubelet = FakeKubelet(str(kubelet_dir)).start()
    try:
        kubelet.wait_for_stream()
        assert probe_until(f"{base}/readyz", 200) == "ok\n"  # all three registered
    finally:
        kubelet.stop()  # a kubelet that goes away, taking every socket: not ready any more
    assert probe_until(f"{base}/readyz", 503).startswith("not ready: ")
    code, text = probe(f"{base}/elsewhere")
    assert code == 404 and "/healthz and /readyz" in text


def test_liveness_fails_once_the_loop_stops_going_round(kubelet_dir, fake_nvml, serve_probes):
    plugin = Plugin(str(kubelet_dir), family("gemshare.io/gpu", 2, GIB, 1.0), HOST_PATHS,
                    health=GpuHealth(fake_nvml))  # never run: its loop is as good as stuck
    base = serve_probes(plugin, stuck_after=5.0)
    assert probe(f"{base}/healthz") == (200, "ok\n")
    plugin.last_round -= 6.0
    code, text = probe(f"{base}/healthz")
    assert code == 503 and re.fullmatch(r"stuck: the plugin's loop has not gone round for \d+ s\n",
                                        text)
    code, text = probe(f"{base}/readyz")
    assert code == 503 and text.startswith("not ready: gemshare.io/gpu: not serving on ")


def test_the_command_serves_the_probes_it_was_asked_for(short_tmp_dirs, plugin_process):
    process, log_path = plugin_process("--kubelet-socket-dir", str(short_tmp_dirs()),
                                       "--health", "127.0.0.1:0")
    wait_for_text(log_path, "answering probes on", process)
    base = re.search(r"answering probes on (http://127\.0\.0\.1:\d+)/healthz",
                     log_path.read_text())[1]
    assert probe(f"{base}/healthz") == (200, "ok\n")
    assert probe_until(f"{base}/readyz", 503).startswith("not ready: ")
    process.send_signal(signal.SIGTERM)
    assert process.wait(WAIT_S) == 0
