"""`make scheduler`, the README's quickstart command, starts a scheduler gemsharectl can reach."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
from ctl_helpers import REPO, make_variables

from gemshare_nvs.service.readiness import wait_until_listening


def test_make_scheduler_runs_in_the_foreground_and_prints_the_socket(ctl):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    directory = Path(tempfile.mkdtemp(prefix="gs-make-", dir="/tmp"))  # short socket path
    socket = directory / "scheduler.sock"
    output = directory / "make.out"
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "LISTEN_FDS",
                                                            "LISTEN_PID")}
    env["GEMSHARE_SOCKET"] = str(socket)
    with output.open("wb") as sink:
        # Its own config (none) and state, whatever the checkout's or the machine's hold.
        make = subprocess.Popen(["make", "-s", "-C", str(REPO), "scheduler", *make_variables(),
                                 f"SCHEDULER_CONFIG={directory}/gemshare.toml",
                                 f"SCHEDULER_STATE_DIR={directory}/state"],
                                env=env, stdin=subprocess.DEVNULL, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_listening(output, socket, make, timeout=300)  # may build and install first
        printed = output.read_text()
        assert f"export GEMSHARE_SOCKET={socket}" in printed, printed
        assert "LD_PRELOAD=" in printed and "libnvs.so" in printed, printed
        result = ctl("status", "--json", env={"GEMSHARE_SOCKET": str(socket)})
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["tq"] == 30
    finally:
        os.killpg(make.pid, signal.SIGTERM)  # make and the scheduler it runs, started above
        try:
            make.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
        shutil.rmtree(directory, ignore_errors=True)


def test_make_scheduler_installs_the_package_without_test_tools(tmp_path):
    """What make scheduler would run for a fresh virtualenv (make -n: nothing is run)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    planned = subprocess.run(["make", "-n", "-C", str(REPO), "scheduler",
                              f"VENV={tmp_path / 'venv'}", f"BUILD={tmp_path / 'build'}"],
                             capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL)
    assert planned.returncode == 0, planned.stderr
    installs = [line for line in planned.stdout.splitlines() if "pip install" in line]
    assert any(line.rstrip().endswith("-e .") for line in installs), installs
    assert not any("[test]" in line for line in installs), installs


def test_make_scheduler_starts_it_through_hold_signals():
    """As the installed command does: no signal kills it while Python starts."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    variables = make_variables()
    dry_run = subprocess.run(["make", "-n", "-C", str(REPO), "scheduler", *variables],
                             capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert dry_run.returncode == 0, dry_run.stderr
    build = variables[0].split("=", 1)[1]
    assert f"exec {build}/hold-signals " in dry_run.stdout, dry_run.stdout
