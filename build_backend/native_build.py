"""The wheel's compiled parts, built by setup.py without make: libnvs.so and the launcher that
is the wheel's gemshare-scheduler (launcher/beside_script.c).

pip's build needs only Python and the package index: with PORTABLE=1 (the default) the
compiler is Zig's, from the `ziglang` module that the build backend asked for as a build
requirement, for glibc 2.17 (the library) and static with musl (the launcher); with PORTABLE=0
it is cc ($CC), for this machine's glibc. The flags are make's own, read from libnvs/build.mk and
launcher/build.mk (tests/ctl/test_native_build.py holds the two to the same values), so a wheel's
library is built as `make ship-lib` builds it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


class BuildError(Exception):
    """What stopped the build, in one line for the user."""


# NAME := value, NAME ?= value or NAME = value, continued by a trailing backslash.
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*[:?]?=[ \t]*((?:.*\\\n)*.*)$", re.M)


def make_variables(makefile: Path) -> dict[str, str]:
    """The variables a makefile assigns, as written (continuations joined)."""
    return {name: " ".join(value.replace("\\\n", " ").split())
            for name, value in ASSIGNMENT.findall(makefile.read_text())}


def variable(makefile: Path, name: str) -> str:
    """One variable of a makefile whose value names no other (make would expand it)."""
    value = make_variables(makefile).get(name)
    if value is None or "$" in value:
        raise BuildError(f"{makefile} assigns no plain {name}, which the build reads")
    return value


LIBNVS_MK = Path("libnvs", "build.mk")
LAUNCHER_MK = Path("launcher", "build.mk")


def library_sources() -> list[str]:
    """libnvs/*/*.c but the compile-time proofs, as libnvs/build.mk's LIBNVS_SRC."""
    return sorted(str(path) for path in Path("libnvs").glob("*/*.c")
                  if not path.name.endswith("_api_check.c"))


def ziglang_compiler() -> str | None:
    """The zig of an importable `ziglang` (the build requirement), or None."""
    spec = importlib.util.find_spec("ziglang")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        zig = Path(folder) / "zig"
        if os.access(zig, os.X_OK):
            return str(zig)
    return None


@dataclass(frozen=True)
class Compiler:
    """How this build compiles: Zig's for glibc `glibc` (portable), or cc for this machine."""
    command: tuple[str, ...]
    portable: bool
    glibc: str = ""

    def library_target(self) -> list[str]:
        if not self.portable:
            return []
        # Zig turns the undefined-behaviour sanitizer on in some modes; the library never wants it.
        return ["-target", f"{platform.machine()}-linux-gnu.{self.glibc}",
                "-fno-sanitize=undefined"]

    def launcher_target(self) -> list[str]:
        if not self.portable:
            return []
        return ["-target", f"{platform.machine()}-linux-musl", "-fno-sanitize=undefined"]


def compiler() -> Compiler:
    """The library's compiler, as PORTABLE asks; BuildError, naming what is missing, where
    there is none."""
    if os.environ.get("PORTABLE", "1") != "1":
        return cc_compiler()
    zig = ziglang_compiler()
    if zig is None:
        raise BuildError(
            "building libnvs.so for glibc 2.17 needs Zig, from the `ziglang` package that pip's "
            "build gets as a build requirement, and none is importable here (in a build "
            "without isolation, pip install ziglang==" + variable(LIBNVS_MK, "ZIGLANG_VERSION")
            + " first); PORTABLE=0 builds with cc for this machine's glibc instead")
    return Compiler((zig, "cc"), portable=True, glibc=variable(LIBNVS_MK, "GLIBC_FLOOR"))


def cc_command() -> list[str]:
    """This machine's C compiler as the environment names it: $CC, or cc."""
    return shlex.split(os.environ.get("CC") or "cc")


def has_cc() -> bool:
    cc = cc_command()
    return bool(cc) and shutil.which(cc[0]) is not None


def cc_compiler() -> Compiler:
    """This machine's C compiler."""
    cc = cc_command()
    if not has_cc():
        raise BuildError(f"this build needs a C compiler, and {cc[0] if cc else 'CC'} is not "
                         f"on PATH: install one (gcc or clang; CC= names another), or build "
                         f"with Zig (leave PORTABLE unset)")
    return Compiler(tuple(cc), portable=False)


def launcher_compiler() -> Compiler:
    """Zig's where it is importable (static with musl, whatever PORTABLE says: the launcher
    needs no glibc), else cc: an editable install gets Zig as a build requirement only where
    there is no cc."""
    zig = ziglang_compiler()
    return Compiler((zig, "cc"), portable=True) if zig else cc_compiler()


def run(command: list[str], what: str) -> None:
    done = subprocess.run(command, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise BuildError(f"building {what} failed (the compiler exited with {done.returncode}; "
                         f"its lines above say why): {shlex.join(command)}")


def build_library(chosen: Compiler, output: Path) -> None:
    """libnvs.so as it ships: stripped, with a build ID made from the sources and the command."""
    sources = library_sources()
    flags = [*chosen.library_target(), *variable(LIBNVS_MK, "LIBNVS_CFLAGS").split(),
             *variable(LIBNVS_MK, "LIBNVS_LDFLAGS").split()]
    libraries = variable(LIBNVS_MK, "LIBNVS_LIBS").split()
    # What libnvs/build.mk's LIBNVS_DEPS names: the sources, headers, tables and the rules.
    headers = sorted(str(path) for pattern in ("*/*.h", "*/*.def")
                     for path in Path("libnvs").glob(pattern))
    digest = hashlib.sha1()
    for path in [*sources, *headers, str(LIBNVS_MK)]:
        digest.update(Path(path).read_bytes())
    # The compiler by name, not by the build environment's passing path: one ID per input.
    digest.update(" ".join([Path(chosen.command[0]).name, *chosen.command[1:], *flags]).encode())
    run([*chosen.command, *flags, f"-Wl,--build-id=0x{digest.hexdigest()}", "-Wl,--strip-all",
         "-o", str(output), *sources, *libraries], "libnvs.so")


def build_launcher(chosen: Compiler, output: Path) -> None:
    """The wheel's gemshare-scheduler: static, so that no dynamic loader runs before it holds
    the signals (with cc, a dynamic one where this machine has no static C library)."""
    flags = [*chosen.launcher_target(), *variable(LAUNCHER_MK, "LAUNCHER_CFLAGS").split()]
    source = str(Path("launcher", "beside_script.c"))
    static = [*chosen.command, *flags, "-static", "-o", str(output), source]
    if chosen.portable:
        run(static, "gemshare-scheduler's launcher")
        return
    if subprocess.run(static, stdin=subprocess.DEVNULL, capture_output=True).returncode != 0:
        print("gemshare: this machine's C library has no static part: gemshare-scheduler's "
              "launcher is linked dynamically (the dynamic loader runs before it holds the "
              "signals, a fraction of a millisecond)", flush=True)
        run([*chosen.command, *flags, "-o", str(output), source],
            "gemshare-scheduler's launcher")
