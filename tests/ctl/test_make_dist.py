"""`make dist`: a wheel per architecture, tagged manylinux_2_17, each carrying its libnvs.so;
auditwheel agrees with the tags, and pip installs a wheel with the three commands and a
`gemsharectl library-path` that gives the library it carries, which a CUDA program then runs
with."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from ctl_helpers import REPO, make_variables, skip_if_pypi_unreachable
from elf_versions import MACHINES, machine, newer_than

ARCHITECTURES = sorted(MACHINES)
TAG = "py3-none-manylinux_2_17_{}"
VERSION = metadata.version("gemshare")
BUILD = Path(make_variables()[0].split("=", 1)[1])
COMMANDS = ("gemshare-scheduler", "gemsharectl", "gemshare-device-plugin")
PACKAGED_LIBRARY = "gemshare_nvs/libnvs.so"
TIMEOUT = 300


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """Each architecture -> its wheel, made by `make dist` into a folder of this module's (and
    the fake driver built, to run a program with a wheel's library)."""
    dist = tmp_path_factory.mktemp("dist")
    result = subprocess.run(["make", "-C", str(REPO), "dist", "fakecuda", f"DIST={dist}",
                             *make_variables()],
                            capture_output=True, text=True, timeout=TIMEOUT,
                            stdin=subprocess.DEVNULL)
    skip_if_pypi_unreachable(result, "make dist")
    assert result.returncode == 0, result.stdout + result.stderr
    return {arch: dist / f"gemshare-{VERSION}-{TAG.format(arch)}.whl" for arch in ARCHITECTURES}


def wheel_text(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(f"gemshare-{VERSION}.dist-info/{name}").decode()


def test_one_wheel_per_architecture_and_nothing_else(wheels):
    folder = next(iter(wheels.values())).parent
    assert sorted(folder.iterdir()) == sorted(wheels.values())
    for arch, wheel in wheels.items():
        tags = re.findall(r"^Tag: (.+)$", wheel_text(wheel, "WHEEL"), re.M)
        assert tags == [TAG.format(arch)]


def test_each_wheel_carries_its_architectures_portable_library(wheels, tmp_path):
    for arch, wheel in wheels.items():
        with zipfile.ZipFile(wheel) as archive:
            library = Path(archive.extract(PACKAGED_LIBRARY, tmp_path / arch))
        assert machine(library) == arch
        assert newer_than(library, "2.17") == {}
        assert library.read_bytes() == (BUILD / arch / "libnvs.so").read_bytes()
        scripts = wheel_text(wheel, "entry_points.txt")
        assert all(f"{command} = " in scripts for command in COMMANDS), scripts


def test_auditwheel_agrees_with_each_tag(wheels):
    for arch, wheel in wheels.items():
        shown = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(wheel)],
                               capture_output=True, text=True, timeout=TIMEOUT)
        said = " ".join(shown.stdout.split())
        assert shown.returncode == 0, shown.stdout + shown.stderr
        assert (f'is consistent with the following platform tag: "manylinux_2_17_{arch}"'
                in said), said
        assert "external shared libraries are required" not in said, said


def purelib(venv: Path) -> Path:
    """The site-packages folder of a virtualenv."""
    return Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True,
                               timeout=60).stdout.strip())


@pytest.fixture(scope="module")
def installed(wheels, tmp_path_factory) -> Path:
    """A new virtualenv with this machine's wheel installed by pip, and the dependencies of
    this one (a path in a .pth file) instead of a download of them."""
    venv = tmp_path_factory.mktemp("wheel-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=TIMEOUT)
    (purelib(venv) / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                           "install", "-q", "--no-deps", "--no-index",
                           "--disable-pip-version-check", str(wheels[platform.machine()])],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    return venv


def test_pip_install_gives_the_three_commands(installed):
    for command in COMMANDS:
        shown = subprocess.run([str(installed / "bin" / command), "--version"],
                               capture_output=True, text=True, timeout=60)
        assert (shown.returncode, shown.stdout.split()) == (0, [command, VERSION]), shown


def test_library_path_is_the_wheels_library_and_a_program_runs_with_it(installed, tmp_path):
    shown = subprocess.run([str(installed / "bin" / "gemsharectl"), "library-path"],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    library = Path(shown.stdout.strip())
    assert library == purelib(installed) / PACKAGED_LIBRARY
    # LD_PRELOAD=$(gemsharectl library-path) on a CUDA program (the stand-in, fake driver).
    fakecuda = BUILD / "fakecuda"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GEMSHARE_")},
           "LD_PRELOAD": str(library), "LD_LIBRARY_PATH": str(fakecuda),
           "FAKECUDA_LOG": str(tmp_path / "fakecuda.log"),
           "GEMSHARE_SOCKET": str(tmp_path / "no-scheduler.sock")}
    ran = subprocess.run([str(fakecuda / "standin"), "init", "alloc", "a", "1M", "attr", "a"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "is_managed=1" in ran.stdout  # converted to Unified Memory: the library is at work
