"""Fixtures for the gemsharectl tests: the real command, stand-in clients, an unprivileged user.

Schedulers come from `scheduler_factory` in tests/conftest.py: real processes on real sockets.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ctl_helpers import RUN_TIMEOUT, StandInClient, run_as_nobody
from typer.testing import CliRunner

from gemshare_ctl import app as ctl_app


def ctl_command() -> list[str]:
    """The installed console script beside this interpreter, else the module."""
    script = Path(sys.executable).with_name("gemsharectl")
    return [str(script)] if script.exists() else [sys.executable, "-m", "gemshare_ctl"]


@pytest.fixture
def ctl():
    """Run gemsharectl as a subprocess: ctl("status", "--json", env={...})."""

    def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        environment = {k: v for k, v in os.environ.items() if k != "GEMSHARE_SOCKET"}
        environment["COLUMNS"] = "200"  # whole table rows, whatever terminal pytest runs in
        environment.update(env or {})
        return subprocess.run([*ctl_command(), *args], capture_output=True, text=True,
                              env=environment, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL)

    return run


@pytest.fixture
def stand_in_client():
    """stand_in_client(socket, name, device=0, pod="", namespace="") -> StandInClient."""
    made: list[StandInClient] = []

    def make(socket: Path, name: str, **options) -> StandInClient:
        made.append(StandInClient(socket, name, **options))
        return made[-1]

    yield make
    for one in made:
        one.close()


@pytest.fixture
def ctl_as_nobody():
    """Run gemsharectl as uid/gid 65534 in a forked child: ctl_as_nobody(*args) -> (status, out).

    The child cannot exec a new interpreter (this one may live where nobody may read), so it
    runs the entry point already imported here. A warm-up run here first imports whatever
    reporting an error needs.
    """
    if os.geteuid() != 0:
        pytest.skip("dropping to an unprivileged uid needs root")
    CliRunner().invoke(ctl_app.app, ["--socket", "/nonexistent/gemshare-warm-up.sock", "status"])
    return lambda *args: run_as_nobody(list(args))
