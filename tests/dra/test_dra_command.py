"""`gemshare-dra-plugin` as a user runs it: its help and errors without the extra, the options
other DRA drivers take, and the command itself, as a process, against the stand-in API server
and kubelet until SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from dra_helpers import FAKE_NVML_DIR, FOUR_GPUS, NODE, wait_until
from standin_kubelet import StandInDraKubelet

from gemshare_dra import cli

WITHOUT_EXTRA = ("import sys; sys.modules['kubernetes'] = None; "
                 "from gemshare_dra.cli import main; sys.exit(main(sys.argv[1:]))")


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_EXTRA, *args], capture_output=True,
                          text=True, timeout=60, env=env)


def test_help_works_without_the_extra_and_names_it():
    done = run("--help")
    assert done.returncode == 0, done.stderr
    help_text = " ".join(done.stdout.split())
    for option in ("--kubeconfig", "--node-name", "--kubelet-plugins-dir",
                   "--kubelet-registry-dir", "--cdi-dir"):
        assert option in help_text
    assert "pip install 'gemshare[dra]'" in help_text


def test_a_run_without_the_extra_says_in_one_line_what_to_install():
    done = run("--node-name", "node-a")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("gemshare-dra-plugin: ")
    assert "pip install 'gemshare[dra]'" in done.stderr


def test_the_defaults_are_those_of_other_dra_drivers(monkeypatch):
    monkeypatch.setenv("NODE_NAME", "worker-3")
    options = cli.parse([])
    assert (options.kubeconfig, options.node_name, options.kubelet_plugins_dir,
            options.kubelet_registry_dir, options.cdi_dir) == (
        None, "worker-3", "/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry",
        "/var/run/cdi")
    assert cli.parse(["--node-name", "n1"]).node_name == "n1"


@pytest.mark.parametrize("args, says", [
    ([], "--node-name NAME or the environment variable NODE_NAME"),
    (["--node-name", "Not_A_Node"], "is not a Kubernetes node name"),
    (["--node-name", "n", "--cdi-dir", "cdi"], "is not an absolute path"),
    (["--node-name", "n", "--memory-overcommit", "0.5"], "from 1 to 10"),
])
def test_a_bad_command_line_is_one_line_and_status_2(args, says):
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    done = run(*args, env=env)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr


def test_outside_a_cluster_without_a_kubeconfig_it_says_so_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    done = subprocess.run([sys.executable, "-m", "gemshare_dra", "--node-name", NODE],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert "from the in-cluster service account (no --kubeconfig given)" in done.stderr


def probe(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_plugins_directory_it_cannot_write_is_one_line(tmp_path, api_server):
    blocked = tmp_path / "plugins"
    blocked.write_text("a file where the directory should be")
    done = subprocess.run(
        [sys.executable, "-m", "gemshare_dra", "--node-name", NODE, "--kubeconfig",
         str(api_server.kubeconfig(tmp_path / "kubeconfig")), "--kubelet-plugins-dir",
         str(blocked)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert "which containers get as /etc/ld.so.preload" in done.stderr


def test_the_command_publishes_serves_and_stops_on_sigterm(short_tmp_dirs, api_server):
    directory = short_tmp_dirs()
    port = free_port()
    log = directory / "log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_NVML", "GEMSHARE_"))}
    env.update(PYTHONPATH=str(FAKE_NVML_DIR), FAKE_NVML_GPUS=json.dumps(FOUR_GPUS),
               NODE_NAME=NODE)
    with open(log, "w") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "gemshare_dra",
             "--kubeconfig", str(api_server.kubeconfig(directory / "kubeconfig")),
             "--kubelet-plugins-dir", str(directory / "plugins"),
             "--kubelet-registry-dir", str(directory / "registry"),
             "--cdi-dir", str(directory / "cdi"), "--poll-interval", "0.2",
             "--health", f"127.0.0.1:{port}"],
            stdout=output, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until(lambda: api_server.slices or process.poll() is not None, "the slice")
        assert process.poll() is None, log.read_text()
        (published,) = api_server.slices.values()
        assert len(published["spec"]["devices"]) == 4
        assert probe(port, "/healthz") == (200, "ok\n")
        # One line at start on how pods asking the extended resources are served: the stand-in
        # says it is 1.37.
        said = [line for line in log.read_text().splitlines() if "extended resources:" in line]
        assert len(said) == 1 and "Kubernetes 1.37" in said[0] and "device plugin" in said[0]
        assert probe(port, "/readyz") == \
            (503, "not ready: not registered with the kubelet (yet)\n")
        kubelet = StandInDraKubelet(directory / "registry")
        assert kubelet.register().name == "gpu.gemshare.io"
        kubelet.close()
        wait_until(lambda: probe(port, "/readyz")[0] == 200, "ready once registered")
        assert (directory / "plugins" / "gpu.gemshare.io" / "ld.so.preload").exists()
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, log.read_text()
        assert "stopping on SIGTERM" in log.read_text()
        assert not list((directory / "registry").iterdir())
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
