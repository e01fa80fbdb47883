"""libnvs's lock state machine (libnvs/lock/lock_core.c) on its own: lock_core_check.c drives it
with events and checks the actions it returns, without threads, sockets or the fake driver. Each
check runs as a test of its own."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from libnvs_programs import REPO

CHECKS = Path(__file__).with_name("lock_core_check.c")


@pytest.fixture(scope="module")
def lock_core_check(tmp_path_factory) -> Path:
    binary = tmp_path_factory.mktemp("lock_core") / "lock_core_check"
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
                    f"-I{REPO / 'libnvs'}", str(REPO / "libnvs" / "lock" / "lock_core.c"),
                    str(CHECKS), "-o", str(binary)], check=True, capture_output=True, text=True)
    return binary


def check_names() -> list[str]:
    """The checks' names, read from the source so that collection needs no compiler."""
    return [line.split("(")[1].split(")")[0] for line in CHECKS.read_text().splitlines()
            if line.strip().startswith("CHECK_ENTRY(")]


def test_every_check_is_run(lock_core_check):
    listed = subprocess.run([lock_core_check, "--list"], check=True, capture_output=True,
                            text=True).stdout.split()
    assert listed == check_names()


@pytest.mark.parametrize("name", check_names())
def test_lock_core(lock_core_check, name):
    done = subprocess.run([lock_core_check, name], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
