"""The scheduler's Kubernetes settings: --cri-socket, --pod-resources-socket and --compute-cap
on the command line and as config keys, checked alike, taken when the scheduler starts; and a
socket given without gRPC installed stops the start, saying what to install."""

from __future__ import annotations

import pytest

from gemshare_nvs.config.parsing import ConfigError, parse
from gemshare_nvs.service import command_line


@pytest.mark.parametrize("args, words", [
    (["--cri-socket", "run/containerd.sock"], "--cri-socket must be an absolute path"),
    (["--cri-socket", "/" + "x" * 107], "--cri-socket must be an absolute path of at most 107"),
    (["--pod-resources-socket", "kubelet.sock"], "--pod-resources-socket must be an absolute"),
    (["--compute-cap", "hard"], "--compute-cap must be one of off, gpu_limit, sm_share, not "
                                "'hard'"),
])
def test_bad_values_are_refused_naming_the_option(short_tmp_dirs, run_scheduler, args, words):
    path = short_tmp_dirs() / "never.sock"
    result = run_scheduler("--socket", str(path), *args)
    assert result.returncode == 2
    assert words in result.stderr and "Traceback" not in result.stderr
    assert not path.exists()


def test_the_options_give_the_settings_and_an_empty_socket_is_none():
    settings = command_line.parse(["--cri-socket", "/run/k3s/containerd/containerd.sock",
                                   "--pod-resources-socket", "", "--compute-cap", "sm_share"])
    assert (settings.cri_socket, settings.pod_resources_socket, settings.compute_cap) == (
        "/run/k3s/containerd/containerd.sock", "", "sm_share")
    assert {"cri_socket", "pod_resources_socket", "compute_cap"} <= settings.given
    defaults = command_line.parse([])
    assert (defaults.cri_socket, defaults.pod_resources_socket, defaults.compute_cap) == (
        None, None, "off")


def test_the_config_file_takes_them_checked_as_the_options_are():
    config = parse('cri_socket = "/var/run/crio/crio.sock"\npod_resources_socket = ""\n'
                   'compute_cap = "gpu_limit"\n', "gemshare.toml")
    assert config.settings == {"cri_socket": "/var/run/crio/crio.sock",
                               "pod_resources_socket": "", "compute_cap": "gpu_limit"}
    with pytest.raises(ConfigError) as refused:
        parse('cri_socket = "crio.sock"\ncompute_cap = true\n', "gemshare.toml")
    assert [problem.key for problem in refused.value.problems] == ["cri_socket", "compute_cap"]
    assert "compute_cap must be one of off, gpu_limit, sm_share, not True" in str(refused.value)


def test_a_socket_given_without_grpc_stops_the_start_saying_what_to_install(
        short_tmp_dirs, run_scheduler):
    directory = short_tmp_dirs()
    blocker = directory / "site" / "grpc"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('No module named grpc')\n")
    socket = directory / "scheduler.sock"
    result = run_scheduler("--socket", str(socket), "--config", "", "--state-dir", "",
                           "--cri-socket", str(directory / "containerd.sock"),
                           env={"PYTHONPATH": str(directory / "site")})
    assert result.returncode == 2
    assert "pip install 'gemshare[kubernetes]'" in result.stderr
    assert "Traceback" not in result.stderr
    assert not socket.exists()


def test_the_settings_are_shown_with_where_they_came_from(scheduler_factory):
    running = scheduler_factory(cri_socket="", compute_cap="gpu_limit")
    with running.connect() as control:
        status = control.request({"op": "status"})["status"]
    assert status["kubernetes"] == {"cri_socket": None, "pod_resources_socket": None,
                                    "node_identity_socket": None,
                                    "containers_known": 0, "compute_cap": "gpu_limit"}
    assert status["settings_from"]["compute_cap"] == "command line"
    assert status["settings_from"]["pod_resources_socket"] == "default"
