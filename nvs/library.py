"""Where libnvs.so, the preload library, is for this installation of gemshare.

A wheel carries it inside the package (gemshare_nvs/libnvs.so); `make install` and the container
image put it at PREFIX/lib/gemshare/libnvs.so and link the package's libnvs.so there, so the path
given is the link's target. A source checkout run in place has it in its build folder once built.
"""

from __future__ import annotations

import os
from pathlib import Path

NAME = "libnvs.so"
PACKAGE = Path(__file__).resolve().parent


class LibraryMissing(Exception):
    """No libnvs.so for this installation; the message says how to get one."""


def library_path(package: Path | None = None) -> Path:
    """The absolute path of libnvs.so, to preload, for the package folder `package` (this one by
    default); LibraryMissing when there is none."""
    package = package or PACKAGE
    packaged = package / NAME
    if packaged.exists():
        return packaged.resolve()
    if packaged.is_symlink():
        raise LibraryMissing(f"the {NAME} this installation links to, "
                             f"{os.path.normpath(packaged.parent / os.readlink(packaged))}, is "
                             "missing: install gemshare again (make install)")
    checkout = package.parent
    if (checkout / "libnvs" / "build.mk").is_file():
        built = checkout / "build" / NAME
        if built.is_file():
            return built
        raise LibraryMissing(f"{NAME} is not built in the source tree {checkout}: run make there "
                             f"(it builds {built})")
    raise LibraryMissing(f"this installation of gemshare carries no {NAME} (no {packaged}): "
                         "install a gemshare wheel for this machine (manylinux, x86_64 or "
                         "aarch64), or build the library from source with make")
