"""`gemsharectl status` as a table and as JSON, with stand-in clients holding, waiting and idle."""

from __future__ import annotations

import json
import os

import pytest
from ctl_helpers import holder_and_waiter


@pytest.fixture
def busy_scheduler(scheduler, stand_in_client):
    """One holder with 3 GiB, one waiter from a pod, one idle client on another device."""
    return (scheduler, *holder_and_waiter(scheduler, stand_in_client, idle_device=1))


def line_with(output: str, *parts: str) -> str:
    lines = [line for line in output.splitlines() if all(part in line for part in parts)]
    assert lines, f"no line holds all of {parts} in:\n{output}"
    return lines[0]


def test_json_holds_tq_mode_and_each_client(ctl, busy_scheduler):
    scheduler, holder, waiter, idle = busy_scheduler
    result = ctl("--socket", str(scheduler.socket), "status", "--json")
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert (status["tq"], status["anti_thrash"]) == (30, "on")
    by_id = {c["id"]: c for c in status["clients"]}
    assert {i: c["state"] for i, c in by_id.items()} == {
        holder.id: "holding", waiter.id: "waiting", idle.id: "idle"}
    assert all(c["pid"] == os.getpid() for c in status["clients"])


def test_table_shows_header_devices_and_clients(ctl, busy_scheduler):
    scheduler, holder, waiter, idle = busy_scheduler
    result = ctl("--socket", str(scheduler.socket), "status")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert str(scheduler.socket) in out
    line_with(out, "TQ 30 s", "anti-thrash on")
    line_with(out, f"#{holder.id} trainer-a", f"#{waiter.id} trainer-b")  # device 0's row
    line_with(out, str(holder.id), str(os.getpid()), "trainer-a", "holding", "3.0 GiB")
    line_with(out, str(waiter.id), "trainer-b", "ml/job-7", "waiting")
    line_with(out, str(idle.id), "idle-c", "idle")
    assert "Connected since" in out


def test_narrow_terminal_drops_minor_columns_not_clients(ctl, busy_scheduler):
    scheduler, holder, waiter, idle = busy_scheduler
    result = ctl("--socket", str(scheduler.socket), "status", env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert "Connected since" not in result.stdout
    line_with(result.stdout, str(holder.id), "holding", "3.0 GiB")
    line_with(result.stdout, str(waiter.id), "waiting")


def test_no_clients(ctl, scheduler):
    result = ctl("--socket", str(scheduler.socket), "status")
    assert result.returncode == 0, result.stderr
    assert "No clients connected." in result.stdout
