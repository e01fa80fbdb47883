"""setuptools' build backend, asking for Zig only where a wheel compiles libnvs.so.

A wheel built from a checkout or the sdist (`pip install .`, `pip wheel .`, `pip install
gemshare-VERSION.tar.gz`) builds the library (setup.py), for glibc 2.17 with Zig's C compiler:
pip's isolated build environment then gets the pinned `ziglang` from PyPI, as a build
requirement, and setup.py runs the compiler it carries. The wheels of `make dist`, which carry
their library already, an editable install, which builds none, and a build for this machine's
glibc with cc (PORTABLE=0 in the environment) do without the download.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from setuptools import build_meta
from setuptools.build_meta import *  # noqa: F401,F403 - every hook; the wheel's is widened below

# libnvs/build.mk pins the release (ZIGLANG_VERSION), for make's own install into .tools/ too.
PIN = re.compile(r"^ZIGLANG_VERSION\s*:?=\s*(\S+)\s*$", re.M)


def zig_requirement() -> list[str]:
    """["ziglang==X"] when this build compiles the library with Zig, else []."""
    if Path("nvs", "libnvs.so").exists() or os.environ.get("PORTABLE", "1") != "1":
        return []
    found = PIN.search(Path("libnvs", "build.mk").read_text())
    if found is None:
        raise RuntimeError("libnvs/build.mk pins no ZIGLANG_VERSION")
    return [f"ziglang=={found[1]}"]


def get_requires_for_build_wheel(config_settings=None) -> list[str]:
    return [*build_meta.get_requires_for_build_wheel(config_settings), *zig_requirement()]
