"""The node-identity service (gemshare-node-identity) holds the runtime's and the kubelet's
sockets in a container of its own: a scheduler given only its socket still learns each
program's pod and budget, fails closed while the service is away, and the service answers
nobody but its own user; its readiness probe fails while the runtime's socket is missing."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
import trio
from node_standins import StandInRuntime
from privileges import require_root, run_as
from scheduler_on_node import (  # noqa: F401 (node: a fixture)
    DEADLINE,
    GIB,
    TRAINER,
    next_limits,
    node,
    program,
    status_of,
)

from gemshare_nvs import protocol as p
from gemshare_nvs.identity_daemon import listen_on
from gemshare_nvs.kubernetes.cgroups import ContainerRef
from gemshare_nvs.kubernetes.identity_server import IdentityServer
from gemshare_nvs.kubernetes.identity_wire import question
from gemshare_nvs.kubernetes.node import NodeLookup

NOBODY = 65534


class Service:
    """An IdentityServer over the node's stand-ins, answering from a thread."""

    def __init__(self, node, path):
        self.path = path
        self.server = IdentityServer(listen_on(str(path)),
                                     NodeLookup(str(node.runtime_path), str(node.kubelet.path)))
        self.thread = threading.Thread(target=self.server.serve, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.stop()
        self.thread.join(DEADLINE)
        self.server.listener.close()
        self.server.lookup.close()


@pytest.fixture
def service(node, short_tmp_dirs):
    started = []

    def start(path=None):
        started.append(Service(node, path or short_tmp_dirs() / "identity.sock"))
        return started[-1]

    yield start
    for each in started:
        each.stop()


def scheduler_settings(node, identity_socket) -> dict:
    # No CRI or pod-resources socket of its own: the scheduler's container mounts neither.
    return {"node_identity_socket": str(identity_socket), "cri_socket": "",
            "pod_resources_socket": "", "proc": node.proc}


async def test_the_scheduler_learns_a_containers_budget_through_the_service(
        inprocess_scheduler, node, service):
    answering = service()
    running = await inprocess_scheduler(**scheduler_settings(node, answering.path))
    node.container(TRAINER, "ml", "train-0", "main", memory_gib=8, compute=30)
    with trio.fail_after(DEADLINE):
        peer, got = await program(running, node, TRAINER, says=("serving", "api-0"))
        status = await status_of(running)
    client, = status["clients"]
    assert p.Limits(8 * GIB, 0) in got
    assert (client["namespace"], client["pod"], client["container"], client["identity_from"],
            client["weight"], client["memory_limit"]) == \
        ("ml", "train-0", "main", "node", 3.0, 8 * GIB)
    assert status["kubernetes"]["node_identity_socket"] == str(answering.path)
    assert status["kubernetes"]["cri_socket"] is None
    assert answering.server.answered == 1


async def test_while_the_service_is_away_a_program_in_a_pod_is_not_named_then_is(
        inprocess_scheduler, node, service, short_tmp_dirs):
    path = short_tmp_dirs() / "identity.sock"
    running = await inprocess_scheduler(**scheduler_settings(node, path))
    node.container(TRAINER, "ml", "train-0", "main", memory_gib=8, compute=30)
    with trio.fail_after(DEADLINE):
        peer, got = await program(running, node, TRAINER, says=("serving", "api-0"))
        client, = (await status_of(running))["clients"]
        assert (client["identity_from"], client["namespace"], client["memory_limit"]) == \
            ("node: not named yet", "", None)
        service(path)  # the sidecar comes up: the program's lookup, retried, gets its budget
        assert await next_limits(peer) == p.Limits(8 * GIB, 0)
    client, = (await status_of(running))["clients"]
    assert (client["identity_from"], client["pod"]) == ("node", "train-0")


def ask(path: str, data: bytes) -> str:
    """The service's answer to `data`; "" when it closes the connection unanswered."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(DEADLINE)
        sock.connect(path)
        try:
            sock.sendall(data)
            return sock.recv(65536).decode()
        except (ConnectionResetError, BrokenPipeError):  # closed with the question unread
            return ""


def test_the_service_answers_its_own_user_alone(node, service):
    require_root()
    answering = service()
    os.chmod(answering.path, 0o666)  # past the file's mode, to reach the check of the peer
    os.chmod(answering.path.parent, 0o755)
    node.container(TRAINER, "ml", "train-0", "main", memory_gib=8)
    asked = question(ContainerRef(TRAINER, "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "cri-o"))
    assert '"pod":"train-0"' in ask(str(answering.path), asked)
    assert run_as(NOBODY, NOBODY, lambda: ask(str(answering.path), asked)) == ""


def test_a_question_that_names_no_container_is_refused(node, service):
    answering = service()
    assert ask(str(answering.path), b'{"container_id":"../../etc","pod_uid":"x"}\n') == ""
    assert answering.server.answered == 0


def probe(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=DEADLINE) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_a_missing_runtime_socket_makes_the_pod_not_ready(short_tmp_dirs):
    directory = short_tmp_dirs()
    runtime_path = directory / "containerd.sock"
    log = directory / "identity.log"
    with open(log, "w") as out:
        command = subprocess.Popen(
            [sys.executable, "-m", "gemshare_nvs.identity_daemon", "--socket",
             str(directory / "identity.sock"), "--cri-socket", str(runtime_path),
             "--pod-resources-socket", "", "--health", "127.0.0.1:0"], stderr=out)
    try:
        deadline = time.monotonic() + DEADLINE
        while not (found := re.search(r"probes on http://127\.0\.0\.1:(\d+)", log.read_text())):
            assert command.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        port = int(found[1])
        code, text = probe(port, "/readyz")
        assert code == 503 and f"the container runtime's socket {runtime_path} is missing" in text
        assert probe(port, "/healthz")[0] == 200
        runtime = StandInRuntime(runtime_path)  # the runtime comes up
        try:
            assert probe(port, "/readyz") == (200, "ok\n")
        finally:
            runtime.stop()
        assert "not ready: the container runtime's socket" in log.read_text()
    finally:
        command.terminate()
        command.wait(DEADLINE)


@pytest.mark.parametrize("args, says", [
    (["--cri-socket", ""], "give the container runtime's socket as an absolute path"),
    (["--cri-socket", "run/containerd.sock"], "as an absolute path"),
    (["--socket", "identity.sock"], "--socket must be an absolute path"),
    (["--health", "nowhere"], "--health"),
])
def test_a_bad_command_line_is_one_line_and_status_2(args, says):
    done = subprocess.run([sys.executable, "-m", "gemshare_nvs.identity_daemon", *args],
                          capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
    assert done.stderr.startswith("gemshare-node-identity: ")
