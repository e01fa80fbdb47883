"""What pyproject.toml cannot say: a wheel carries libnvs.so, so it is platform-specific, and a
wheel built from the sdist builds that library first.

`make dist` puts the library in nvs/ before it builds each wheel (--plat-name gives the
platform); a wheel built from a checkout or the sdist (pip install ., pip install
gemshare-VERSION.tar.gz) has none there, and runs `make -f libnvs/build.mk -f ship.mk ship-lib`,
which needs make. It builds for glibc 2.17 with the Zig of the `ziglang` module that pip's build
environment got as a build requirement (build_backend/gemshare_backend.py); PORTABLE=0 in the
environment builds with cc for this machine's glibc instead, and says so.
An editable install (pip install -e .) builds nothing: a source tree's library is build/'s.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

LIBRARY = Path("nvs") / "libnvs.so"
PACKAGED = Path("gemshare_nvs") / "libnvs.so"


class BuildWithLibrary(build_py):
    """The package, with the library made here when the tree does not hold one already."""

    def run(self) -> None:
        super().run()
        if self.editable_mode or LIBRARY.exists():
            return  # package data carries the one make dist placed
        if shutil.which("make") is None:
            sys.exit("gemshare: building libnvs.so needs make, which is not on PATH: install "
                     "make (GNU make), or install a wheel of `make dist`, which carries the "
                     "library")
        with tempfile.TemporaryDirectory(prefix="gemshare-lib-") as build:
            made = subprocess.run(["make", "-f", "libnvs/build.mk", "-f", "ship.mk",
                                   f"BUILD={build}", f"PYTHON={sys.executable}",
                                   *zig_of_ziglang(), "ship-lib"])
            if made.returncode != 0:
                sys.exit(f"gemshare: building libnvs.so failed (make exited with "
                         f"{made.returncode}; its lines above say why)")
            if os.environ.get("PORTABLE", "1") != "1":
                print(f"gemshare: libnvs.so was built with cc (PORTABLE=0) for this machine's "
                      f"{glibc()} and may need a glibc as new to load, unlike the wheels' "
                      f"(glibc 2.17 and newer)", file=sys.stderr)
            target = Path(self.build_lib) / PACKAGED
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(build) / "ship" / "libnvs.so", target)
            os.chmod(target, 0o755)


def zig_of_ziglang() -> list[str]:
    """ZIG=the compiler of an importable `ziglang` (the build requirement), for make; none
    when there is no such module, and make then finds or installs its own (libnvs/build.mk)."""
    spec = importlib.util.find_spec("ziglang")
    folders = spec.submodule_search_locations if spec is not None else None
    for folder in folders or []:
        zig = Path(folder) / "zig"
        if os.access(zig, os.X_OK):
            return [f"ZIG={zig}"]
    return []


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
    py3-none-PLATFORM, for any Python 3 of the platform."""

    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(distclass=WithLibrary, cmdclass={"build_py": BuildWithLibrary, "bdist_wheel": PlatformWheel})
