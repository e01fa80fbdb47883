"""libnvs's pauses between connection attempts (libnvs/wire/conn.c) on their own:
conn_backoff_check.c makes attempts on real sockets with a clock of its own and checks each
pause, so nothing here waits. Each check runs as a test of its own."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from libnvs_programs import REPO

CHECKS = Path(__file__).with_name("conn_backoff_check.c")


@pytest.fixture(scope="module")
def conn_backoff_check(tmp_path_factory) -> Path:
    binary = tmp_path_factory.mktemp("conn_backoff") / "conn_backoff_check"
    cc = os.environ.get("CC", "cc")
    libnvs = REPO / "libnvs"
    subprocess.run([cc, "-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
                    f"-I{libnvs}", str(libnvs / "wire" / "conn.c"), str(libnvs / "wire" / "wire.c"),
                    str(CHECKS), "-o", str(binary)], check=True, capture_output=True, text=True)
    return binary


def check_names() -> list[str]:
    """The checks' names, read from the source so that collection needs no compiler."""
    return [line.split("(")[1].split(")")[0] for line in CHECKS.read_text().splitlines()
            if line.strip().startswith("CHECK_ENTRY(")]


def test_every_check_is_run(conn_backoff_check):
    listed = subprocess.run([conn_backoff_check, "--list"], check=True, capture_output=True,
                            text=True).stdout.split()
    assert listed == check_names()


@pytest.mark.parametrize("name", check_names())
def test_conn_backoff(conn_backoff_check, name):
    with tempfile.TemporaryDirectory(prefix="gs-conn-", dir="/tmp") as directory:  # short path
        done = subprocess.run([conn_backoff_check, name, directory], capture_output=True,
                              text=True, timeout=30)
    assert done.returncode == 0, done.stderr
