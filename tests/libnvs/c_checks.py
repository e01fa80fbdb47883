"""Checks written in C against libnvs files on their own: a program built from those files and
the checks' source, which lists its checks (`--list`) and runs one by name (exit status 0 when
it holds, else 1 and why on stderr). test_lock_core.py and test_host_claims.py use it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from libnvs_programs import REPO


def build(binary: Path, checks: Path, libnvs_files: list[str], flags: tuple = ()) -> Path:
    """The checks built with the named libnvs sources (paths under libnvs/)."""
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
                    f"-I{REPO / 'libnvs'}", *flags,
                    *(str(REPO / "libnvs" / name) for name in libnvs_files), str(checks),
                    "-pthread", "-o", str(binary)], check=True, capture_output=True, text=True)
    return binary


def listed(binary: Path) -> list[str]:
    return subprocess.run([binary, "--list"], check=True, capture_output=True,
                          text=True).stdout.split()


def assert_holds(binary: Path, name: str) -> None:
    done = subprocess.run([binary, name], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
