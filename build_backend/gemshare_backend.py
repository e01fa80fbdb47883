"""setuptools' build backend, asking for Zig only where a wheel compiles with it.

A wheel built from a checkout or the sdist (`pip install .`, `pip wheel .`, `pip install
gemshare-VERSION.tar.gz`) builds the library for glibc 2.17, and gemshare-scheduler's launcher
static, with Zig's C compiler (setup.py, build_backend/native_build.py): pip's isolated build
environment then gets the pinned `ziglang` from PyPI, as a build requirement, and the build runs
the compiler it carries; no make is needed. The wheels of `make dist`, which carry both already,
an editable install, which builds no library (and its launcher with cc, Zig only where there is
no cc), and a build for this machine's glibc with cc (PORTABLE=0 in the environment) do without
the download.
"""

from __future__ import annotations

import os
from pathlib import Path

from native_build import LIBNVS_MK, has_cc, variable
from setuptools import build_meta
from setuptools.build_meta import *  # noqa: F401,F403 - every hook; the wheel's is widened below

# What make dist and make install put in the tree they build a wheel from.
GIVEN = (Path("nvs", "libnvs.so"), Path("launcher", "gemshare-scheduler"))


def zig() -> list[str]:
    # libnvs/build.mk pins the release (ZIGLANG_VERSION), for make's own install into .tools/.
    return [f"ziglang=={variable(LIBNVS_MK, 'ZIGLANG_VERSION')}"]


def zig_requirement() -> list[str]:
    """["ziglang==X"] when this wheel compiles with Zig, else []."""
    if all(path.exists() for path in GIVEN) or os.environ.get("PORTABLE", "1") != "1":
        return []
    return zig()


def get_requires_for_build_wheel(config_settings=None) -> list[str]:
    return [*build_meta.get_requires_for_build_wheel(config_settings), *zig_requirement()]


def get_requires_for_build_editable(config_settings=None) -> list[str]:
    """An editable install compiles only the launcher, with cc; with Zig where there is none."""
    needed = [] if GIVEN[1].exists() or has_cc() else zig()
    return [*build_meta.get_requires_for_build_editable(config_settings), *needed]
