"""The sdist of `make sdist`, unpacked, is a source tree of its own: `make lib` there gets Zig
itself (no .tools/ comes with it) and builds the library for glibc 2.17, `make dist` makes the
wheels and an sdist, `make install` stages everything, and `make distclean` leaves the tree as
it was unpacked; `make test` says that the tests are a clone's. Run in this order, each make
reuses what the one before it built, as a user's would. `make help` lists every target a user
asks for, with one line each."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from ctl_helpers import REPO, make_variables, skip_if_pypi_unreachable
from elf_versions import MACHINES, machine, newer_than

VERSION = metadata.version("gemshare")
TIMEOUT = 600
STAGE_PREFIX = "usr/local"


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("sdist")
    made = subprocess.run(["make", "-C", str(REPO), "sdist", f"DIST={dist}", *make_variables()],
                          capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL)
    assert made.returncode == 0, made.stdout + made.stderr
    return dist / f"gemshare-{VERSION}.tar.gz"


@pytest.fixture(scope="module")
def unpacked(sdist, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(sdist) as archive:
        archive.extractall(folder, filter="data")
    return folder / f"gemshare-{VERSION}"


def tree(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*")}


@pytest.fixture(scope="module")
def as_unpacked(unpacked) -> set[str]:
    """Every path of the unpacked sdist before any make ran in it."""
    return tree(unpacked)


def make(folder: Path, *arguments: str) -> subprocess.CompletedProcess:
    """make in the unpacked sdist. Zig is installed by the Python running the tests, which has
    pip (a system python3 may not); a target that wants the virtualenv gets the one running the
    tests, which -o keeps make from making again in the sdist (make venv is tested elsewhere)."""
    venv = Path(sys.prefix)
    done = subprocess.run(["make", "-C", str(folder), *arguments, f"PYTHON={sys.executable}",
                           f"VENV={venv}", "-o", str(venv / ".package"),
                           "-o", str(venv / ".installed")],
                          capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL)
    skip_if_pypi_unreachable(done, f"make {' '.join(arguments)}")
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_it_carries_no_tests_and_nothing_built(as_unpacked):
    assert not any(path.startswith(("tests", ".tools", "build/", "dist/")) for path in as_unpacked)
    assert "launcher/hold_signals.c" in as_unpacked and "tests" not in as_unpacked


def test_make_test_there_says_the_tests_are_a_clones(unpacked):
    done = subprocess.run(["make", "-C", str(unpacked), "test"], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode != 0
    assert ("make test: the tests and benchmarks are not in this tree (an sdist carries "
            "neither); run it in a clone") in done.stderr, done.stderr


def test_make_lib_gets_zig_itself_and_builds_for_glibc_2_17(unpacked, as_unpacked):
    make(unpacked, "lib")
    library = unpacked / "build" / "libnvs.so"
    assert machine(library) in MACHINES and newer_than(library, "2.17") == {}
    assert (unpacked / ".tools").is_dir()


def test_make_dist_makes_a_wheel_per_architecture_and_an_sdist(unpacked):
    make(unpacked, "dist")
    dist = unpacked / "dist"
    wheels = {arch: dist / f"gemshare-{VERSION}-py3-none-manylinux_2_17_{arch}.whl"
              for arch in MACHINES}
    for arch, wheel in wheels.items():
        with zipfile.ZipFile(wheel) as archive:
            library = Path(archive.extract("gemshare_nvs/libnvs.so", dist / arch))
        assert machine(library) == arch and newer_than(library, "2.17") == {}
        assert (dist / f"libnvs-{VERSION}-{arch}.so.debug").is_file()
    with tarfile.open(dist / f"gemshare-{VERSION}.tar.gz") as archive:
        again = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"Makefile", "launcher/build.mk", "build_backend/gemshare_backend.py"} <= again


def test_make_install_stages_the_library_hold_signals_package_units_and_docs(unpacked, tmp_path):
    make(unpacked, "install", f"DESTDIR={tmp_path}")
    prefix = tmp_path / STAGE_PREFIX
    for staged in ("lib/gemshare/libnvs.so", "lib/gemshare/hold-signals",
                   "lib/gemshare/python/gemshare_nvs/daemon.py", "bin/gemshare-scheduler",
                   "bin/gemsharectl", "bin/gemshare-device-plugin",
                   "lib/systemd/system/gemshare-scheduler.service",
                   "share/doc/gemshare/README.md", "share/doc/gemshare/bench/README.md",
                   "share/man/man1/gemsharectl.1"):
        assert (prefix / staged).exists(), staged
    assert newer_than(prefix / "lib/gemshare/libnvs.so", "2.17") == {}


def test_make_distclean_leaves_the_tree_as_it_was_unpacked(unpacked, as_unpacked):
    make(unpacked, "lib")  # something to clean, when this test runs alone
    (unpacked / ".venv").mkdir(exist_ok=True)  # stands for the one make venv makes there
    done = subprocess.run(["make", "-C", str(unpacked), "distclean"], capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert tree(unpacked) == as_unpacked


def listed_targets() -> dict[str, str]:
    shown = subprocess.run(["make", "-s", "-C", str(REPO), "help"], capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    found = [re.fullmatch(r"  make(?: (\S+))? +(\S.*)", line) for line in lines]
    assert all(found), lines
    return {match[1] or "": match[2] for match in found}


def known_targets() -> set[str]:
    """Every target make knows in this tree, from its database."""
    database = subprocess.run(["make", "-pRrq", "-C", str(REPO), "no-such-target"],
                              capture_output=True, text=True, timeout=60).stdout
    return set(re.findall(r"^([a-z][\w-]*):", database, re.M))


def test_make_help_lists_every_target_of_the_makefile_with_one_line_each():
    listed = listed_targets()
    assert "" in listed  # plain `make`
    assert set(listed) - {""} <= known_targets()
    phony = re.findall(r"^\.PHONY:((?:.*\\\n)*.*)$", (REPO / "Makefile").read_text(), re.M)
    # `all` is plain `make`; tests-here is a step of other targets, no target of its own.
    declared = set(" ".join(phony).replace("\\", " ").split()) - {"all", "tests-here"}
    assert declared <= set(listed), declared - set(listed)
    assert {"help", "distclean", "clean", "install", "dist", "lib"} <= set(listed)
