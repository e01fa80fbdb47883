"""`pip install .` as a new user runs it: on a copy of the sources as a fresh clone has them (no
.tools/ with Zig, no build/), into a new virtualenv, without the `kubernetes` extra, on a PATH
with neither make nor a C compiler. pip's isolated build environment gets Zig as a build
requirement; the library the package carries then loads from glibc 2.17 on, as the wheels' does,
and `pip wheel .` is tagged manylinux_2_17 as they are. Every command answers --help and
--version without gRPC, the device plugin says which extra it needs, and the scheduler that pip
installs survives SIGHUP, SIGUSR1 and SIGUSR2 sent from its first milliseconds on."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest
from ctl_helpers import REPO, skip_if_pypi_unreachable
from elf_versions import is_static, machine, newer_than
from installed_commands import COMMANDS
from signal_moments import HELD, acted_on, survives_every_moment

VERSION = metadata.version("gemshare")
EXTRA = "pip install 'gemshare[kubernetes]'"
TIMEOUT = 600
# What a fresh clone lacks: what make and pip made here, and what tests and editors leave.
NOT_IN_A_CLONE = shutil.ignore_patterns(".git", ".tools", ".venv", "build", "dist", "*.egg-info",
                                        "__pycache__", ".hypothesis", ".pytest_cache", ".device",
                                        ".whl", ".gl", "*.so")
# `python -m` is sent them once its first statement holds them (the interpreter's start before
# it is not covered): while it still imports its libraries.
PYTHON_M_SIGNAL_AFTER_S = 0.1


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("clone") / "gemshare"
    shutil.copytree(REPO, source, ignore=NOT_IN_A_CLONE, symlinks=True)
    return source


@pytest.fixture(scope="module")
def no_tools(tmp_path_factory) -> str:
    """A PATH with no make and no C compiler: what the build needs it gets from PyPI."""
    return str(tmp_path_factory.mktemp("no-tools-bin"))


@pytest.fixture(scope="module")
def venv(clone, tmp_path_factory, no_tools) -> Path:
    """A new virtualenv into which `pip install .` was run in the copy, dependencies from the
    package index, the kubernetes extra left out."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=TIMEOUT)
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                           "install", "-q", "--disable-pip-version-check", "."],
                          cwd=clone, capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL, env={**os.environ, "PATH": no_tools})
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


def launcher_beside_its_script(venv: Path) -> bool:
    """bin/gemshare-scheduler a static program of this machine, and the script it runs beside
    it, with the interpreter line pip wrote."""
    launcher, script = venv / "bin" / "gemshare-scheduler", venv / "bin" / "gemshare-scheduler.py"
    return (machine(launcher) == platform.machine() and is_static(launcher) and
            script.read_text().splitlines()[0] == f"#!{venv / 'bin' / 'python'}")


def test_the_installed_scheduler_is_a_static_launcher_beside_its_script(venv):
    assert launcher_beside_its_script(venv)


def test_an_editable_install_without_a_c_compiler_gets_zig_for_its_launcher(
        clone, tmp_path, no_tools):
    venv = tmp_path / "editable"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=TIMEOUT)
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                           "install", "-q", "--disable-pip-version-check", "--no-deps", "-e", "."],
                          cwd=clone, capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL, env={**os.environ, "PATH": no_tools})
    skip_if_pypi_unreachable(done, "pip install -e .")
    assert done.returncode == 0, done.stdout + done.stderr
    assert launcher_beside_its_script(venv)


def test_the_extra_is_left_out(venv):
    for module in ("grpc", "google.protobuf"):
        assert run(venv, "python", "-c", f"import {module}").returncode != 0, module


@pytest.mark.parametrize("command", sorted(COMMANDS))  # one order for every xdist worker
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


@pytest.mark.parametrize("signum", HELD, ids=lambda signum: signum.name)
def test_the_installed_scheduler_survives_each_signal_from_its_first_milliseconds(
        venv, scheduler_factory, signum):
    """Sent 1 to 50 ms after its exec, across the interpreter's start: the launcher has held it
    (pip's console script, which it replaced, died of every one until 20-40 ms)."""
    program = [str(venv / "bin" / "gemshare-scheduler")]
    survives_every_moment(lambda: scheduler_factory(program=program, wait=False), signum)


def test_python_m_survives_the_signals_once_it_runs_its_first_statement(
        venv, scheduler_factory):
    """`python -m gemshare_nvs.daemon` starts no launcher: the scheduler's first statement holds
    the three (nvs/service/early_signals.py); the interpreter's start before it is not covered
    (README says so)."""
    running = scheduler_factory(program=[str(venv / "bin" / "python"), "-m",
                                         "gemshare_nvs.daemon"], wait=False)
    time.sleep(PYTHON_M_SIGNAL_AFTER_S)
    for signum in HELD:
        running.process.send_signal(signum)
    acted_on(running, *HELD)


@pytest.fixture(scope="module")
def built_wheel(clone, tmp_path_factory) -> Path:
    """What `pip wheel .` makes, as a user runs it."""
    out = tmp_path_factory.mktemp("wheel")
    built = pip_wheel(clone, out)
    skip_if_pypi_unreachable(built, "pip wheel .")
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = out.glob("gemshare-*.whl")
    return wheel


def test_pip_wheel_is_tagged_manylinux_2_17_as_make_dists_and_auditwheel_agrees(built_wheel):
    arch = platform.machine()
    assert built_wheel.name == f"gemshare-{VERSION}-py3-none-manylinux_2_17_{arch}.whl"
    shown = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(built_wheel)],
                           capture_output=True, text=True, timeout=TIMEOUT)
    said = " ".join(shown.stdout.split())
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f'is consistent with the following platform tag: "manylinux_2_17_{arch}"' in said, said


def test_pip_wheel_with_portable_0_builds_with_cc_and_says_for_which_glibc(clone, tmp_path):
    built = pip_wheel(clone, tmp_path, PORTABLE="0")
    skip_if_pypi_unreachable(built, "pip wheel .")
    assert built.returncode == 0, built.stdout + built.stderr
    said = " ".join((built.stdout + built.stderr).split())
    assert (f"gemshare: libnvs.so was built with cc (PORTABLE=0) for this machine's "
            f"{os.confstr('CS_GNU_LIBC_VERSION')} and may need a glibc as new to load") in said
    # Only as new a glibc as this machine's: the plain tag, not manylinux.
    (wheel,) = tmp_path.glob("gemshare-*.whl")
    assert wheel.name == f"gemshare-{VERSION}-py3-none-linux_{platform.machine()}.whl"


def test_without_a_c_compiler_a_build_for_this_glibc_says_what_it_needs_in_one_line(
        clone, tmp_path, no_tools):
    built = pip_wheel(clone, tmp_path, PORTABLE="0", PATH=no_tools)
    skip_if_pypi_unreachable(built, "pip wheel .")
    assert built.returncode != 0
    assert ("gemshare: this build needs a C compiler, and cc is not on PATH: install one (gcc or "
            "clang; CC= names another), or build with Zig (leave PORTABLE unset)") in \
        built.stderr + built.stdout, built.stdout + built.stderr
    assert "Traceback" not in built.stdout + built.stderr
