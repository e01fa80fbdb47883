"""Faults in the middle of a move out, with libnvs.so and the real scheduler on the fake driver,
whose moves take time (FAKECUDA_MIGRATE_GBPS): a program killed while it moves memory out after a
drop, and a scheduler stopped and started again while a holder moves. On the 64 MiB device a
holder's memory never fits beside a context reserve, so every drop asks for all of it."""

from __future__ import annotations

import re
import time
from datetime import datetime

import pytest

import libnvs_fakelog as fakelog
from libnvs_programs import (NO_EARLY_RELEASE, grants, scheduler_status, wait_file, wait_for,
                             wait_for_client)

MIB = 1 << 20
# 24 MiB at 10 MB/s: 2.5 s to move out, time enough to act in the middle of it. The checked
# buffer is small, so that its checks cost little (copies out of managed memory are slow too),
# and the newest, so that it goes last: after the fault.
HOLDER = ["alloc", "pad", "22M", "alloc", "a", "2M", "write", "a", 17]
SLOW = {"FAKECUDA_MIGRATE_GBPS": "0.01"}


def checks(result) -> list[str]:
    return [c["ok"] for c in result.steps("check")]


def at(log: str, pattern: str) -> int:
    """Where the first line matching `pattern` starts in the log, for comparing order."""
    found = re.search(pattern, log)
    assert found, f"no line matching {pattern!r} in:\n{log}"
    return found.start()


def logged_at(log: str, pattern: str) -> datetime:
    """When the scheduler logged the first line matching `pattern`."""
    found = re.search(rf"^(\S+ \S+) .*{pattern}", log, re.MULTILINE)
    assert found, f"no line matching {pattern!r} in:\n{log}"
    return datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S.%f")


def start_holder(gpu, env: dict, then: list):
    """A program that takes the lock with HOLDER's memory, keeps it until a drop, then runs
    `then`."""
    holder = gpu.start(["init", *HOLDER, "launch", 100, "sync", "touch-file", gpu.path("held"),
                        *then], env={**SLOW, **NO_EARLY_RELEASE, **env})
    wait_file(gpu.path("held"))
    wait_for_client(gpu.socket, holder.pid, state="holding")
    return holder


def wait_moving(scheduler, pid: int) -> None:
    """Until the client with this pid reports progress of a move to the host: its move has begun
    and has seconds left (the scheduler logs progress at debug level)."""
    wait_for(lambda: re.search(rf"moving client \d+ \(pid {pid},[^\n]* to the host so far",
                               scheduler.log()), f"pid {pid} moving memory out")


def test_a_program_killed_while_it_moves_out_hands_the_lock_on_at_once(gpu_with):
    # A grace far past what the test waits: only the disconnect can hand the lock on in time.
    gpu, scheduler = gpu_with(tq=1, grace_ms=60_000, debug=True)
    holder = start_holder(gpu, {}, ["wait-file", gpu.path("never")])
    waiter = gpu.start(["init", "alloc", "b", "2M", "write", "b", 34, "launch", 100, "sync",
                        "check", "b", 34, "touch-file", gpu.path("ran"), "wait-file",
                        gpu.path("end")])
    wait_moving(scheduler, holder.pid)
    holder.kill()
    wait_file(gpu.path("ran"), timeout=10)
    status = scheduler_status(scheduler.socket)
    gpu.path("end").touch()
    result = waiter.wait()
    assert result.returncode == 0 and checks(result) == ["1"], result.describe()

    log = scheduler.log()
    dropped = at(log, rf"drop client \d+ \(pid {holder.pid},[^\n]*evict 24 MiB")
    gone = rf"disconnect client \d+ \(pid {holder.pid},[^\n]*held device 0"
    granted = rf"grant client \d+ \(pid {waiter.pid},"
    assert dropped < at(log, gone) < at(log, granted), log
    # Handed on as the disconnect was handled, not at a later timer.
    assert (logged_at(log, granted) - logged_at(log, gone)).total_seconds() < 1, log
    assert not re.search(rf"moved client \d+ \(pid {holder.pid},", log), log  # killed mid-move
    assert "revoke" not in log, log
    # Nothing of the dead program is counted on the device any more: only the waiter's memory.
    assert [c["pid"] for c in status["clients"]] == [waiter.pid], status
    (device,) = status["devices"]
    assert device["resident_bytes"] == 2 * MIB and not device["dropping"], status


@pytest.mark.parametrize(("move", "stop"), [("copy", "sigterm"), ("copy", "sigkill"),
                                             ("migration", "sigkill")],
                         ids=["copy-sigterm", "copy-sigkill", "migration-sigkill"])
def test_a_scheduler_restarted_during_a_move_out_loses_no_data(gpu_with, restartable, move, stop):
    gpu, scheduler = gpu_with(tq=1, debug=True)
    # Its first check waits at the gate through the move and the fault: the first thing it runs
    # once it may, and its memory must be back by then.
    holder = start_holder(gpu, {"GEMSHARE_MOVE_COPY": "1" if move == "copy" else "0"},
                          ["wait-file", gpu.path("go"), "check", "a", 17, "wait-file",
                           gpu.path("end"), "launch", 100, "sync", "check", "a", 17])
    # Asks for the lock, which the old scheduler never grants it; runs unscheduled once that
    # one is gone.
    waiter = gpu.start(["init", "alloc", "b", "2M", "write", "b", 34, "launch", 100, "sync",
                        "check", "b", 34])
    wait_moving(scheduler, holder.pid)
    # Libnvs finds the scheduler gone at its next progress report, by when the check is waiting.
    gpu.path("go").touch()
    stopped_ns = time.monotonic_ns()
    if stop == "sigkill":
        scheduler.process.kill()  # a crash, not a clean stop
    scheduler.stop()
    before = scheduler.log()  # the new scheduler writes its log over this one
    again = restartable(scheduler, tq=86400)
    wait_for_client(again.socket, holder.pid)
    gpu.path("end").touch()
    for program in (holder, waiter):
        result = program.wait()
        assert result.returncode == 0, result.describe()
        assert set(checks(result)) == {"1"}, result.describe()

    # The scheduler went while the move ran: it saw progress and never the end.
    assert re.search(rf"drop client \d+ \(pid {holder.pid},[^\n]*evict 24 MiB", before), before
    assert not re.search(rf"moved client \d+ \(pid {holder.pid},", before), before
    events = gpu.events()
    out = fakelog.moves_out(events, holder.pid)
    ends = fakelog.exec_ends(events, holder.pid)
    assert out and max(ends.get(e["seq"], 0) for e in out) > stopped_ns, events
    # The program came back to the new scheduler and ran its last turn under its lock.
    assert re.search(rf"register client \d+ \(pid {holder.pid},", again.log()), again.log()
    assert grants(again.log(), holder.pid) >= 1, again.log()
