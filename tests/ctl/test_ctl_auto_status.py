"""`gemsharectl` with mode auto, end to end: switching to it, and status with several holders and
the figures the scheduler decides with."""

from __future__ import annotations

import io
import json

from ctl_helpers import wait_for_status
from rich.console import Console

from gemshare_ctl import render

GIB = 1 << 30


def test_auto_lets_two_fitting_clients_hold_and_status_shows_why(ctl, scheduler_factory,
                                                                 stand_in_client):
    scheduler = scheduler_factory(context_reserve_mib=512)
    result = ctl("--socket", str(scheduler.socket), "--anti-thrash", "auto")
    assert result.returncode == 0, result.stderr
    assert "anti-thrash auto" in result.stdout
    first = stand_in_client(scheduler.socket, "fits-a")
    second = stand_in_client(scheduler.socket, "fits-b")
    for client, gib in ((first, 2), (second, 3)):
        client.report_memory(gib * GIB, 16 * GIB)
        client.take_lock()  # both get it: 2 + 3 + 2 x 0.5 <= 16
    wait_for_status(scheduler.socket, lambda s: len(s["devices"][0]["holders"]) == 2)

    result = ctl("--socket", str(scheduler.socket), "status", "--json")
    assert result.returncode == 0, result.stderr
    device = json.loads(result.stdout)["devices"][0]
    assert (device["capacity_bytes"], device["capacity_source"], device["context_reserve_bytes"],
            device["holders_allocated_bytes"]) == (16 * GIB, "reported", 512 << 20, 5 * GIB)

    result = ctl("--socket", str(scheduler.socket), "status")
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if f"#{first.id} fits-a" in line)
    assert "5.0 GiB + 2 x 512.0 MiB / 16.0 GiB (reported)" in row
    assert "anti-thrash auto" in result.stdout
    assert [line for line in result.stdout.splitlines() if f"#{second.id} fits-b" in line]


def draw(status: dict) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(render.status_view(console, status, "/run/gemshare/scheduler.sock"))
    return console.file.getvalue()


def test_each_holder_asked_to_drop_is_marked_alone():
    out = draw({"tq": 30, "anti_thrash": "auto", "devices": [{
        "index": 0, "holders": [7, 8], "dropping": [8], "drop_pending": True, "waiters": [],
        "capacity_bytes": None, "context_reserve_bytes": 0, "holders_allocated_bytes": 0}],
        "clients": [{"id": 7, "pid": 100, "name": "a", "state": "holding"},
                    {"id": 8, "pid": 101, "name": "b", "state": "holding"}]})
    assert "#7 a (pid 100)" in out and "#8 b (pid 101), asked to drop" in out
    assert "#7 a (pid 100), asked to drop" not in out
    assert "capacity unknown: one holder" in out


def test_the_budget_column_appears_only_in_auto():
    status = {"tq": 30, "anti_thrash": "on", "devices": [{
        "index": 0, "holders": [], "waiters": [], "capacity_bytes": 8 * GIB,
        "context_reserve_bytes": 0, "holders_allocated_bytes": 0}], "clients": []}
    assert "Held + reserves" not in draw(status)
    assert "0 B + 0 x 0 B / 8.0 GiB" in draw({**status, "anti_thrash": "auto"})
