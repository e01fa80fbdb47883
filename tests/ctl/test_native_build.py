"""A wheel's build compiles without make (build_backend/native_build.py) but with make's own
flags: what it reads from libnvs/build.mk and launcher/build.mk is what make itself makes of
them, and its compiler lines are make's, so that a wheel's library and launcher are built as
`make ship-lib` and `make wheel-launchers` build them."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest
from ctl_helpers import REPO

sys.path.insert(0, str(REPO / "build_backend"))
import native_build  # noqa: E402


def made(expression: str, *makefiles: str) -> list[str]:
    """What make expands `expression` to, with `makefiles` read (in the repository)."""
    read = [word for makefile in makefiles for word in ("-f", makefile)]
    shown = subprocess.run(["make", "-s", "--no-print-directory", *read,
                            "--eval", f"gemshare-shown: ; @echo {expression}", "gemshare-shown"],
                           cwd=REPO, capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout.split()


@pytest.fixture(autouse=True)
def in_the_repository(monkeypatch):
    monkeypatch.chdir(REPO)  # the build runs in the source tree, reading relative paths


@pytest.mark.parametrize("makefile, name", [
    ("libnvs/build.mk", "LIBNVS_CFLAGS"), ("libnvs/build.mk", "LIBNVS_LDFLAGS"),
    ("libnvs/build.mk", "LIBNVS_LIBS"), ("libnvs/build.mk", "GLIBC_FLOOR"),
    ("libnvs/build.mk", "ZIGLANG_VERSION"), ("launcher/build.mk", "LAUNCHER_CFLAGS")])
def test_each_flag_read_is_makes_own(makefile, name):
    assert native_build.variable(Path(makefile), name).split() == made(f"$({name})", makefile)


def test_the_library_sources_are_makes():
    assert native_build.library_sources() == sorted(made("$(LIBNVS_SRC)", "libnvs/build.mk"))


def test_zigs_compiler_lines_are_makes():
    """For the library, zig_cc's; for the launcher, zig_static's (in any order: flags)."""
    arch = platform.machine()
    zig = native_build.Compiler(("ZIG", "cc"), portable=True,
                                glibc=native_build.variable(native_build.LIBNVS_MK, "GLIBC_FLOOR"))
    (make_zig, *library) = made(f"$(call zig_cc,{arch})", "libnvs/build.mk")
    assert make_zig.endswith("/zig") and library == ["cc", *zig.library_target()]
    (_, *launcher) = made(f"$(call zig_static,{arch})", "libnvs/build.mk", "launcher/build.mk")
    ours = ["cc", *zig.launcher_target(), "-static",
            *native_build.variable(native_build.LAUNCHER_MK, "LAUNCHER_CFLAGS").split()]
    assert sorted(launcher) == sorted(ours)


def test_a_variable_that_names_another_is_refused_in_one_line(tmp_path):
    makefile = tmp_path / "rules.mk"
    makefile.write_text("PLAIN := -O2 \\\n    -g\nMADE := $(PLAIN) -Wall\n")
    assert native_build.variable(makefile, "PLAIN") == "-O2 -g"
    for name in ("MADE", "ABSENT"):
        with pytest.raises(native_build.BuildError, match=f"assigns no plain {name}, which the "
                                                          f"build reads"):
            native_build.variable(makefile, name)
