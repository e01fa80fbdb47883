"""`gemshare-device-plugin` as a process: its options, waiting for the kubelet, stopping."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fake_kubelet import FakeKubelet
from plugin_helpers import REPO, UUID_A, plugin_environment, wait_for_text

from gemshare_nvs.service.mps import MpsControl
from gemshare_nvs.version import version
from gemshare_plugin import cli
from gemshare_plugin.allocation import CONTAINER_SOCKET_DIR, SHARED_MEMORY_DIR

WAIT_S = 15.0


def run_command(*args: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gemshare_plugin", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=30, env=plugin_environment(**env),
                          stdin=subprocess.DEVNULL)


def test_version_is_the_packages():
    result = run_command("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"gemshare-device-plugin {version()}"


@pytest.mark.parametrize("args, says", [
    (["--slots", "0"], "'0' is not a whole number of slots from 1 to 1000"),
    (["--slots", "ten"], "'ten' is not a whole number"),
    (["--kubelet-socket-dir", "relative/dir"], "'relative/dir' is not an absolute path"),
    (["--library", "libnvs.so"], "'libnvs.so' is not an absolute path"),
    (["--health", "localhost"], "expected ADDRESS:PORT such as 127.0.0.1:9410"),
    (["--no-such-option"], "No such option: --no-such-option"),
    (["--mps-pipe-directory", "mps/pipe"],
     "--mps-pipe-directory must be an absolute path of at most 255 bytes, not 'mps/pipe'"),
    (["--mps-pipe-directory", "/" + "p" * 255],
     "--mps-pipe-directory must be an absolute path of at most 255 bytes, not '/ppp"),
    (["--memory-unit", "32M"],
     "--memory-unit must be a size such as 16GiB or 512MiB, from 64 MiB to 1 TiB, not '32M'"),
    (["--memory-unit", "2TiB"],
     "--memory-unit must be a size such as 16GiB or 512MiB, from 64 MiB to 1 TiB, not '2TiB'"),
    (["--memory-unit", "lots"], "--memory-unit must be a size such as 16GiB or 512MiB"),
    (["--memory-unit", "100.5MiB"],
     "--memory-unit must be a whole number of MiB (the units' device IDs name it in MiB), "
     "not '100.5MiB'"),
    (["--memory-overcommit", "0.5"],
     "--memory-overcommit must be a number from 1 to 10, such as 1.5, not '0.5'"),
    (["--memory-overcommit", "nan"],
     "--memory-overcommit must be a number from 1 to 10, such as 1.5, not 'nan'"),
    (["--memory-overcommit", "11"],
     "--memory-overcommit must be a number from 1 to 10, such as 1.5, not '11'"),
])
def test_bad_options_are_refused_with_their_reason(args, says):
    result = run_command(*args)
    assert result.returncode == 2
    # One plain line, as in a pod's log: the command, what is wrong, where the help is.
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"gemshare-device-plugin: Invalid value for '{args[0]}': "
                                    f"{says}") or \
        result.stderr.startswith(f"gemshare-device-plugin: {says}"), result.stderr
    assert result.stderr.endswith("; see 'gemshare-device-plugin --help'\n")


@pytest.mark.parametrize("name, why", [
    ("requests.example.com/gpu", "it starts with 'requests.'"),
    ("a..b/gpu", "its domain 'a..b' is not a DNS subdomain"),
    ("gpu", "it has no domain"),
    ("nvidia.kubernetes.io/gpu", "names in the kubernetes.io domain"),
])
def test_a_resource_name_the_kubelet_refuses_stops_the_start_with_its_rule(name, why):
    result = run_command("--resource-name", name)
    assert result.returncode == 2
    assert f"{name!r} cannot be registered: {why}" in result.stderr
    assert "the kubelet registers only an extended resource name: DOMAIN/NAME" in result.stderr


def test_a_resource_name_whose_memory_or_compute_name_the_kubelet_refuses_stops_the_start():
    name = "example.com/" + "g" * 60  # itself 60 characters after the '/', the others more
    result = run_command("--resource-name", name)
    assert result.returncode == 2
    assert f"the memory and compute resources are named after it: '{name}-memory' cannot be " \
           "registered: its name after the '/' is longer than 63 characters" in result.stderr


def test_the_memory_unit_and_overcommit_are_read():
    defaults = cli.parse([])
    assert (defaults.memory_unit, defaults.memory_overcommit) == (1 << 30, 1.0)
    given = cli.parse(["--memory-unit", "1.5G", "--memory-overcommit", "2.5"])
    assert (given.memory_unit, given.memory_overcommit) == (1536 << 20, 2.5)
    assert cli.parse(["--memory-unit", "256MiB"]).memory_unit == 256 << 20


def test_a_health_address_not_of_this_machine_stops_the_start_saying_so():
    result = run_command("--health", "192.0.2.1:9411")  # TEST-NET-1: no machine's address
    assert result.returncode == 1
    assert "cannot serve probes on 192.0.2.1:9411: 192.0.2.1 is not an address of this " \
           "machine; give --health one of its own" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_relative_gemshare_socket_is_refused():
    result = run_command(GEMSHARE_SOCKET="scheduler.sock")
    assert result.returncode == 2 and "--scheduler-socket" in result.stderr


def test_the_command_waits_for_the_kubelet_serves_it_and_stops_on_sigterm(short_tmp_dirs,
                                                                          plugin_process):
    directory = short_tmp_dirs()
    process, log_path = plugin_process(
        "--kubelet-socket-dir", str(directory), "--slots", "2", "--resource-name",
        "example.com/shared-gpu", "--library", "/opt/gs/libnvs.so",
        GEMSHARE_SOCKET="/run/gs-test/sched.sock")
    kubelet = FakeKubelet(str(directory))
    try:
        wait_for_text(log_path, "waiting for the kubelet's socket", process)
        kubelet.start()
        stream = kubelet.wait_for_stream(resource="example.com/shared-gpu", timeout=WAIT_S)
        assert kubelet.registrations[0].resource_name == "example.com/shared-gpu"
        assert kubelet.registrations[0].endpoint == "example.com-shared-gpu.sock"
        assert len(stream.next(timeout=WAIT_S)) == 4
        memory = kubelet.wait_for_stream(resource="example.com/shared-gpu-memory",
                                         timeout=WAIT_S)
        assert len(memory.next(timeout=WAIT_S)) == 80 + 141  # the GPUs' GiB
        kubelet.wait_for_stream(resource="example.com/shared-gpu-compute", timeout=WAIT_S)
        client = kubelet.client("example.com/shared-gpu")
        [container] = client.allocate([f"{UUID_A}::1"]).container_responses
        assert container.envs["GEMSHARE_SOCKET"] == f"{CONTAINER_SOCKET_DIR}/sched.sock"
        assert {m.host_path for m in container.mounts} == {"/opt/gs/libnvs.so", "/run/gs-test"}
        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT_S) == 0
        assert not {"example.com-shared-gpu.sock", "example.com-shared-gpu-memory.sock",
                    "example.com-shared-gpu-compute.sock"} & set(os.listdir(directory))
        assert "registered example.com/shared-gpu" in log_path.read_text()
    finally:
        kubelet.stop(remove_sockets=False)


@pytest.mark.parametrize("socket", ["/var/run/gemshare/scheduler.sock", "/run/gs/s.sock",
                                    "/srv//gpu/./sched.sock"])
def test_mps_names_the_pipe_directory_the_scheduler_starts_its_daemon_with(socket):
    scheduler_pipe = MpsControl.for_scheduler(Path(os.path.normpath(socket)), None).pipe
    options = cli.parse(["--scheduler-socket", socket, "--mps"])
    assert options.mps_pipe_directory == str(scheduler_pipe)
    assert cli.parse(["--scheduler-socket", socket]).mps_pipe_directory is None


def test_an_adopted_daemons_pipe_directory_is_named_and_implies_mps():
    assert cli.parse(["--mps-pipe-directory", "/opt/mps/pipe/"]).mps_pipe_directory == \
        "/opt/mps/pipe"
    assert cli.parse(["--mps", "--mps-pipe-directory", "/opt/mps/pipe"]).mps_pipe_directory == \
        "/opt/mps/pipe"


def test_the_command_with_mps_hands_containers_the_pipe_directory_and_shm(short_tmp_dirs,
                                                                          plugin_process):
    directory = short_tmp_dirs()
    process, log_path = plugin_process("--kubelet-socket-dir", str(directory), "--mps",
                                       GEMSHARE_SOCKET="/run/gs-test/sched.sock")
    kubelet = FakeKubelet(str(directory)).start()
    try:
        kubelet.wait_for_stream(timeout=WAIT_S)
        [container] = kubelet.client().allocate([f"{UUID_A}::1"]).container_responses
        mounts = {m.container_path: (m.host_path, m.read_only) for m in container.mounts}
        assert mounts["/run/gs-test/mps/pipe"] == ("/run/gs-test/mps/pipe", False)
        assert mounts[SHARED_MEMORY_DIR] == (SHARED_MEMORY_DIR, False)
        assert "MPS: containers get the control daemon's pipe directory /run/gs-test/mps/pipe" \
            in log_path.read_text()
        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT_S) == 0
    finally:
        kubelet.stop(remove_sockets=False)
