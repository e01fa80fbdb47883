"""The host's staging claims between programs (libnvs/memory/host_room.c) on their own:
host_claim_check.c runs them in processes of its own, the lock files in the test's directory
(never the host's, which other programs may hold). Each check runs as a test of its own."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from libnvs_programs import REPO

CHECKS = Path(__file__).with_name("host_claim_check.c")


@pytest.fixture(scope="module")
def host_claim_check(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("host_claims")
    binary = directory / "host_claim_check"
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
                    f"-I{REPO / 'libnvs'}",
                    f'-DGS_HOST_ROOM_LOCK="{directory / "room.lock"}"',
                    f'-DGS_HOST_URGENT_LOCK="{directory / "urgent.lock"}"',
                    str(REPO / "libnvs" / "memory" / "host_room.c"), str(CHECKS), "-pthread",
                    "-o", str(binary)], check=True, capture_output=True, text=True)
    return binary


def check_names() -> list[str]:
    """The checks' names, read from the source so that collection needs no compiler."""
    listed = re.search(r"#define CHECKS\(X\) (.*)", CHECKS.read_text()).group(1)
    return re.findall(r"X\((\w+)\)", listed)


def test_every_check_is_run(host_claim_check):
    listed = subprocess.run([host_claim_check, "--list"], check=True, capture_output=True,
                            text=True).stdout.split()
    assert listed == check_names()


@pytest.mark.parametrize("name", check_names())
def test_host_claims(host_claim_check, name):
    done = subprocess.run([host_claim_check, name], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
