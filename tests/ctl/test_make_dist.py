"""`make dist`: a wheel per architecture, tagged manylinux_2_17 and marked platform-specific,
each carrying its libnvs.so without debug information (its debug file beside it, one build ID
for both); an sdist from which pip builds a wheel with a library for glibc 2.17, Zig coming
from a build requirement; auditwheel agrees with the tags,
and pip installs a wheel with the three commands and a `gemsharectl library-path` that gives the
library it carries, which a CUDA program then runs with."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from ctl_helpers import REPO, make_variables, skip_if_pypi_unreachable
from elf_versions import MACHINES, machine, newer_than
from elftools.elf.elffile import ELFFile

ARCHITECTURES = sorted(MACHINES)
TAG = "py3-none-manylinux_2_17_{}"
VERSION = metadata.version("gemshare")
BUILD = Path(make_variables()[0].split("=", 1)[1])
COMMANDS = ("gemshare-scheduler", "gemsharectl", "gemshare-device-plugin", "gemshare-dra-plugin",
            "gemshare-node-identity")
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


def debug_file(wheel: Path, arch: str) -> Path:
    return wheel.parent / f"libnvs-{VERSION}-{arch}.so.debug"


def sdist(wheels: dict[str, Path]) -> Path:
    return next(iter(wheels.values())).parent / f"gemshare-{VERSION}.tar.gz"


def test_one_wheel_and_debug_file_per_architecture_an_sdist_and_nothing_else(wheels):
    folder = next(iter(wheels.values())).parent
    expected = [*wheels.values(), *(debug_file(w, a) for a, w in wheels.items()), sdist(wheels)]
    assert sorted(folder.iterdir()) == sorted(expected)
    for arch, wheel in wheels.items():
        tags = re.findall(r"^Tag: (.+)$", wheel_text(wheel, "WHEEL"), re.M)
        assert tags == [TAG.format(arch)]
        # It carries a compiled library: installers must not take it for pure Python.
        assert "Root-Is-Purelib: false" in wheel_text(wheel, "WHEEL")


def test_the_metadata_names_the_project_its_extra_and_its_classifiers(wheels):
    meta = wheel_text(next(iter(wheels.values())), "METADATA")
    assert re.search(r"^Project-URL: Source, https://", meta, re.M)
    assert "Classifier: Operating System :: POSIX :: Linux" in meta
    assert "Provides-Extra: kubernetes" in meta
    grpc = re.findall(r"^Requires-Dist: grpcio.*$", meta, re.M)
    assert grpc and all('extra == "kubernetes"' in line or 'extra == "test"' in line
                        for line in grpc), grpc


def build_id(path: Path) -> str:
    with path.open("rb") as stream:
        for section in ELFFile(stream).iter_sections():
            if section.name == ".note.gnu.build-id":
                (note,) = section.iter_notes()
                return note["n_desc"]
    raise AssertionError(f"{path} has no build ID")


def debug_sections(path: Path) -> list[str]:
    with path.open("rb") as stream:
        return [s.name for s in ELFFile(stream).iter_sections() if s.name.startswith(".debug")]


def test_each_wheel_carries_its_architectures_portable_library(wheels, tmp_path):
    for arch, wheel in wheels.items():
        with zipfile.ZipFile(wheel) as archive:
            library = Path(archive.extract(PACKAGED_LIBRARY, tmp_path / arch))
        assert machine(library) == arch
        assert newer_than(library, "2.17") == {}
        assert library.read_bytes() == (BUILD / arch / "ship" / "libnvs.so").read_bytes()
        # Stripped, and its debug file is the one with its build ID and the debug information.
        debug = debug_file(wheel, arch)
        assert debug_sections(library) == [] and ".debug_info" in debug_sections(debug)
        assert build_id(library) == build_id(debug)
        assert library.stat().st_size < debug.stat().st_size / 2
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


def pip_install_into_a_new_venv(venv: Path, package: Path, *options: str,
                                env: dict | None = None) -> subprocess.CompletedProcess:
    """pip installs `package` into a new virtualenv at `venv`, which gets the dependencies of
    this one (a path in a .pth file) instead of a download of them."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=TIMEOUT)
    (purelib(venv) / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                           "install", "-q", "--no-deps", "--disable-pip-version-check",
                           *options, str(package)],
                          capture_output=True, text=True, timeout=TIMEOUT, env=env,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def installed(wheels, tmp_path_factory) -> Path:
    """A new virtualenv with this machine's wheel installed by pip."""
    venv = tmp_path_factory.mktemp("wheel-venv")
    done = pip_install_into_a_new_venv(venv, wheels[platform.machine()], "--no-index")
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


def test_the_sdist_holds_what_builds_everything(wheels):
    with tarfile.open(sdist(wheels)) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for needed in ("setup.py", "pyproject.toml", "build_backend/gemshare_backend.py",
                   "Makefile", "ship.mk", "libnvs/build.mk", "launcher/build.mk",
                   "launcher/hold_signals.c",
                   "libnvs/entry/hooks.c", "libnvs/wire/gemshare_protocol.h",
                   "systemd/gemshare-scheduler.service", "docs/protocol.md", "LICENSE",
                   "CHANGELOG.md", "nvs/daemon.py", "ctl/app.py", "plugin/cli.py",
                   "man/manpage.py"):
        assert needed in names, needed
    assert not [name for name in names if name.endswith(".so")]  # sources only


def test_pip_install_of_the_sdist_builds_a_library_for_glibc_2_17(wheels, tmp_path):
    """`pip install gemshare-VERSION.tar.gz` into a new virtualenv: pip's isolated build
    environment gets Zig (ziglang) as a build requirement, the unpacked sdist having no
    .tools/, and the wheel it builds carries the library, marked platform-specific."""
    env = {k: v for k, v in os.environ.items() if k != "PORTABLE"}
    done = pip_install_into_a_new_venv(tmp_path / "venv", sdist(wheels), env=env)
    skip_if_pypi_unreachable(done, "pip install of the sdist")
    assert done.returncode == 0, done.stdout + done.stderr
    shown = subprocess.run([str(tmp_path / "venv" / "bin" / "gemsharectl"), "library-path"],
                           capture_output=True, text=True, timeout=60)
    library = Path(shown.stdout.strip())
    assert library == purelib(tmp_path / "venv") / PACKAGED_LIBRARY, shown
    assert machine(library) == platform.machine() and debug_sections(library) == []
    assert newer_than(library, "2.17") == {}
    (wheel_file,) = purelib(tmp_path / "venv").glob("gemshare-*.dist-info/WHEEL")
    assert "Root-Is-Purelib: false" in wheel_file.read_text()
