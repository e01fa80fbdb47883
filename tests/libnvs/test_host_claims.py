"""The host's staging claims between programs (libnvs/memory/host_room.c) on their own:
host_claim_check.c runs them in processes of its own, the lock files in the test's directory
(never the host's, which other programs may hold). Each check runs as a test of its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import c_checks

CHECKS = Path(__file__).with_name("host_claim_check.c")


@pytest.fixture(scope="module")
def host_claim_check(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("host_claims")
    return c_checks.build(directory / "host_claim_check", CHECKS, ["memory/host_room.c"],
                          (f'-DGS_HOST_ROOM_LOCK="{directory / "room.lock"}"',
                           f'-DGS_HOST_URGENT_LOCK="{directory / "urgent.lock"}"'))


def check_names() -> list[str]:
    """The checks' names, read from the source so that collection needs no compiler."""
    listed = re.search(r"#define CHECKS\(X\) (.*)", CHECKS.read_text()).group(1)
    return re.findall(r"X\((\w+)\)", listed)


def test_every_check_is_run(host_claim_check):
    assert c_checks.listed(host_claim_check) == check_names()


@pytest.mark.parametrize("name", check_names())
def test_host_claims(host_claim_check, name):
    c_checks.assert_holds(host_claim_check, name)
