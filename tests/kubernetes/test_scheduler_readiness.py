"""A node socket the scheduler was given that is missing is a readiness failure (its metrics'
/readyz answers 503 naming it), not a silent fallback to programs without pods or budgets; it
is ready again once the socket is there."""

from __future__ import annotations

import urllib.error
import urllib.request

from metrics_scrape import metrics_url
from node_standins import StandInRuntime


def readyz(scheduler) -> tuple[int, str]:
    url = metrics_url(scheduler).removesuffix("/metrics") + "/readyz"
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_a_missing_cri_socket_makes_the_scheduler_not_ready(scheduler_factory, short_tmp_dirs):
    runtime_path = short_tmp_dirs() / "containerd.sock"
    scheduler = scheduler_factory(metrics="127.0.0.1:0", cri_socket=str(runtime_path),
                                  pod_resources_socket="")
    assert readyz(scheduler) == \
        (503, f"not ready: the container runtime's socket {runtime_path} is missing\n")
    runtime = StandInRuntime(runtime_path)  # the runtime starts after the scheduler
    try:
        assert readyz(scheduler) == (200, "ok\n")
    finally:
        runtime.stop()


def test_a_missing_node_identity_socket_makes_it_not_ready(scheduler_factory, short_tmp_dirs):
    path = short_tmp_dirs() / "identity.sock"
    scheduler = scheduler_factory(metrics="127.0.0.1:0", node_identity_socket=str(path))
    assert readyz(scheduler) == \
        (503, f"not ready: the node-identity service's socket {path} is missing\n")


def test_off_kubernetes_it_is_ready(scheduler_factory):
    scheduler = scheduler_factory(metrics="127.0.0.1:0", cri_socket="", pod_resources_socket="")
    assert readyz(scheduler) == (200, "ok\n")
