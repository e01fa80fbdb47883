"""`pip install .` as a new user runs it: on a copy of the sources as a fresh clone has them (no
.tools/ with Zig, no build/), into a new virtualenv, without the `kubernetes` extra. pip's
isolated build environment gets Zig as a build requirement; the library the package carries
then loads from glibc 2.17 on, as the wheels' does. Every command answers --help and --version
without gRPC, the device plugin says which extra it needs, and the scheduler that pip installs
survives SIGHUP, SIGUSR1 and SIGUSR2 sent while it starts."""

from __future__ import annotations

import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest
from ctl_helpers import REPO, skip_if_pypi_unreachable
from elf_versions import machine, newer_than

VERSION = metadata.version("gemshare")
COMMANDS = ("gemshare-scheduler", "gemsharectl", "gemshare-device-plugin", "gemshare-dra-plugin",
            "gemshare-node-identity")
EXTRA = "pip install 'gemshare[kubernetes]'"
TIMEOUT = 600
# What a fresh clone lacks: what make and pip made here, and what tests and editors leave.
NOT_IN_A_CLONE = shutil.ignore_patterns(".git", ".tools", ".venv", "build", "dist", "*.egg-info",
                                        "__pycache__", ".hypothesis", ".pytest_cache", ".device",
                                        ".whl", ".gl", "*.so")
# Sent this soon after the start, while the scheduler still imports its libraries.
SIGNAL_AFTER_S = 0.1


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("clone") / "gemshare"
    shutil.copytree(REPO, source, ignore=NOT_IN_A_CLONE, symlinks=True)
    return source


@pytest.fixture(scope="module")
def venv(clone, tmp_path_factory) -> Path:
    """A new virtualenv into which `pip install .` was run in the copy, dependencies from the
    package index, the kubernetes extra left out."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=TIMEOUT)
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                           "install", "-q", "--disable-pip-version-check", "."],
                          cwd=clone, capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL)
    skip_if_pypi_unreachable(done, "pip install .")
    assert done.returncode == 0, done.stdout + done.stderr
    return venv


def pip_wheel(clone: Path, out: Path, **env: str) -> subprocess.CompletedProcess:
    """`pip wheel .` in the copy, verbose (a build's own lines show only so), with `env` added."""
    return subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps",
                           "--disable-pip-version-check", "-w", str(out), "."],
                          cwd=clone, capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, **env}, stdin=subprocess.DEVNULL)


def run(venv: Path, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / command[0]), *command[1:]], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_the_installed_library_was_built_here_for_glibc_2_17_with_zig_from_the_build(
        venv, clone):
    shown = run(venv, "gemsharectl", "library-path")
    assert shown.returncode == 0, shown.stderr
    library = Path(shown.stdout.strip())
    assert library.is_relative_to(venv) and library.name == "libnvs.so"
    assert machine(library) == platform.machine()
    assert newer_than(library, "2.17") == {}
    # Zig came into pip's build environment, not into the tree as make's own does.
    assert not (clone / ".tools").exists()


def test_the_extra_is_left_out(venv):
    for module in ("grpc", "google.protobuf"):
        assert run(venv, "python", "-c", f"import {module}").returncode != 0, module


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_answers_help_and_version_without_the_extra(venv, command):
    helped = run(venv, command, "--help")
    assert (helped.returncode, helped.stderr) == (0, ""), helped
    assert f"Usage: {command} [OPTIONS]" in helped.stdout, helped.stdout
    shown = run(venv, command, "--version")
    assert (shown.returncode, shown.stdout.split()) == (0, [command, VERSION]), shown


def test_the_device_plugin_without_the_extra_says_in_one_line_which_to_install(venv, tmp_path):
    ran = run(venv, "gemshare-device-plugin", "--kubelet-socket-dir", str(tmp_path))
    assert ran.returncode == 1
    assert ran.stderr.splitlines() == [
        "gemshare-device-plugin: the device plugin needs gRPC and protobuf, which are not "
        f"installed (No module named 'google'); {EXTRA}"], ran.stderr


def test_the_dra_driver_without_the_extra_says_in_one_line_which_to_install(venv):
    ran = run(venv, "gemshare-dra-plugin", "--node-name", "node-a")
    assert ran.returncode == 1
    assert ran.stderr.splitlines() == [
        "gemshare-dra-plugin: the DRA driver needs gRPC, protobuf and the Kubernetes client, "
        "and No module named 'grpc'; pip install 'gemshare[dra]'"], ran.stderr


@pytest.mark.parametrize("program", [["bin/gemshare-scheduler"],
                                     ["bin/python", "-m", "gemshare_nvs.daemon"]],
                         ids=["console-script", "python-m"])
def test_the_installed_scheduler_survives_signals_sent_as_it_starts(
        venv, program, scheduler_factory):
    """pip's console script and `python -m` start without hold-signals: the scheduler's first
    statement holds the three (nvs/service/early_signals.py), and it acts on each once it
    serves."""
    running = scheduler_factory(program=[str(venv / program[0]), *program[1:]], wait=False)
    time.sleep(SIGNAL_AFTER_S)
    for signum in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        running.process.send_signal(signum)
    running.wait_until_accepting()
    deadline = time.monotonic() + 15
    while "SIGUSR2 received: status" not in running.log() and time.monotonic() < deadline:
        assert running.process.poll() is None, running.log()
        time.sleep(0.05)
    log = running.log()
    assert "(SIGHUP)" in log and "SIGUSR1 received: status" in log, log
    assert "SIGUSR2 received: status" in log, log
    with running.connect() as control:
        assert control.request({"op": "status"})["ok"] is True
    assert running.stop() == 0


def test_pip_wheel_with_portable_0_builds_with_cc_and_says_for_which_glibc(clone, tmp_path):
    built = pip_wheel(clone, tmp_path, PORTABLE="0")
    skip_if_pypi_unreachable(built, "pip wheel .")
    assert built.returncode == 0, built.stdout + built.stderr
    said = " ".join((built.stdout + built.stderr).split())
    assert (f"gemshare: libnvs.so was built with cc (PORTABLE=0) for this machine's "
            f"{os.confstr('CS_GNU_LIBC_VERSION')} and may need a glibc as new to load") in said
    (wheel,) = tmp_path.glob("gemshare-*.whl")
    assert wheel.stat().st_size > 0


def test_without_make_the_build_says_what_it_needs_in_one_line(clone, tmp_path):
    (tmp_path / "bin").mkdir()  # a PATH without make
    built = pip_wheel(clone, tmp_path, PORTABLE="0", PATH=str(tmp_path / "bin"))
    skip_if_pypi_unreachable(built, "pip wheel .")
    assert built.returncode != 0
    assert ("gemshare: building libnvs.so needs make, which is not on PATH: install make (GNU "
            "make), or install a wheel of `make dist`, which carries the library") in built.stderr \
        + built.stdout, built.stdout + built.stderr
    assert "Traceback" not in built.stdout + built.stderr
