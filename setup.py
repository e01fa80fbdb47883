"""What pyproject.toml cannot say: a wheel carries compiled parts, so it is platform-specific,
and a wheel built from a checkout or the sdist builds them first, without make
(build_backend/native_build.py says with which compiler).

- libnvs.so: `make dist` puts the library in nvs/ before it builds each wheel (--plat-name
  gives the platform); a wheel built from a checkout or the sdist (pip install ., pip wheel .,
  pip install gemshare-VERSION.tar.gz) has none there and builds it, for glibc 2.17 with the
  Zig of the `ziglang` build requirement (build_backend/gemshare_backend.py), and is tagged
  manylinux_2_17 as make dist's; PORTABLE=0 in the environment builds with cc for this
  machine's glibc instead, says so, and keeps the plain linux tag.
- gemshare-scheduler: no console script (pip's would start Python at once, and a SIGHUP,
  SIGUSR1 or SIGUSR2 during the interpreter's start would kill it) but two scripts: the
  launcher launcher/beside_script.c, compiled, which holds those signals and runs the other,
  launcher/gemshare-scheduler.py, whose interpreter line pip writes. make dist and make install
  give the launcher as launcher/gemshare-scheduler; otherwise it is built here.
An editable install (pip install -e .) builds no library: a source tree's library is build/'s.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
from pathlib import Path

from native_build import (
    LIBNVS_MK,
    BuildError,
    build_launcher,
    build_library,
    compiler,
    launcher_compiler,
    variable,
)
from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

# After setuptools, whose copy of distutils this is.
from distutils.command.build_scripts import build_scripts  # noqa: E402,I001

LIBRARY = Path("nvs") / "libnvs.so"
PACKAGED = Path("gemshare_nvs") / "libnvs.so"
SCHEDULER_SCRIPT = "launcher/gemshare-scheduler.py"
GIVEN_LAUNCHER = Path("launcher") / "gemshare-scheduler"


def builds_portable_library() -> bool:
    """Whether this wheel's library is built here with Zig, for glibc 2.17."""
    return not LIBRARY.exists() and os.environ.get("PORTABLE", "1") == "1"


def built(build) -> None:
    """Build one part; a failure ends the build with its one line, no traceback."""
    try:
        build()
    except BuildError as error:
        sys.exit(f"gemshare: {error}")


class BuildWithLibrary(build_py):
    """The package, with the library made here when the tree does not hold one already."""

    def run(self) -> None:
        super().run()
        if self.editable_mode or LIBRARY.exists():
            return  # package data carries the one make dist placed
        target = Path(self.build_lib) / PACKAGED
        target.parent.mkdir(parents=True, exist_ok=True)
        built(lambda: build_library(compiler(), target))
        os.chmod(target, 0o755)
        if os.environ.get("PORTABLE", "1") != "1":
            print(f"gemshare: libnvs.so was built with cc (PORTABLE=0) for this machine's "
                  f"{glibc()} and may need a glibc as new to load, unlike the wheels' "
                  f"(glibc 2.17 and newer)", file=sys.stderr)


class WithLauncher(build_scripts):
    """The Python script (its first line made `#!python`, which pip rewrites), and beside it
    the launcher, named gemshare-scheduler."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_dir) / "gemshare-scheduler"
        if GIVEN_LAUNCHER.exists():
            shutil.copyfile(GIVEN_LAUNCHER, target)
        else:
            built(lambda: build_launcher(launcher_compiler(), target))
        os.chmod(target, 0o755)


def glibc() -> str:
    """This machine's C library, as in "glibc 2.39"."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or "C library"
    except (ValueError, OSError):
        return "C library"


class WithLibrary(Distribution):
    """Not pure: the package holds a compiled library, so it goes where compiled code goes
    (platlib: the wheel's root, `Root-Is-Purelib: false`), as auditwheel wants it."""

    def has_ext_modules(self) -> bool:
        return True


class PlatformWheel(bdist_wheel):
    """No Python extension, though: no Python loads the library, so the tag stays
    py3-none-PLATFORM, for any Python 3 of the platform; PLATFORM is the one given
    (--plat-name), else manylinux for the glibc the library was built for here with Zig, else
    this machine's plain linux_ARCH."""

    def get_tag(self) -> tuple[str, str, str]:
        _, _, plat = super().get_tag()
        if not self.plat_name_supplied and builds_portable_library():
            floor = variable(LIBNVS_MK, "GLIBC_FLOOR").replace(".", "_")
            plat = f"manylinux_{floor}_{platform.machine()}"
        return "py3", "none", plat


setup(distclass=WithLibrary, scripts=[SCHEDULER_SCRIPT],
      cmdclass={"build_py": BuildWithLibrary, "build_scripts": WithLauncher,
                "bdist_wheel": PlatformWheel})
