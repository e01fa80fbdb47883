"""libnvs's lock state machine (libnvs/lock/lock_core.c) on its own: lock_core_check.c drives it
with events and checks the actions it returns, without threads, sockets or the fake driver. Each
check runs as a test of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

import c_checks

CHECKS = Path(__file__).with_name("lock_core_check.c")


@pytest.fixture(scope="module")
def lock_core_check(tmp_path_factory) -> Path:
    return c_checks.build(tmp_path_factory.mktemp("lock_core") / "lock_core_check", CHECKS,
                          ["lock/lock_core.c"])


def check_names() -> list[str]:
    """The checks' names, read from the source so that collection needs no compiler."""
    return [line.split("(")[1].split(")")[0] for line in CHECKS.read_text().splitlines()
            if line.strip().startswith("CHECK_ENTRY(")]


def test_every_check_is_run(lock_core_check):
    assert c_checks.listed(lock_core_check) == check_names()


@pytest.mark.parametrize("name", check_names())
def test_lock_core(lock_core_check, name):
    c_checks.assert_holds(lock_core_check, name)
