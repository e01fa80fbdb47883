"""A scheduler that stops answering (SIGSTOP: what a deadlock or a stuck host looks like), with
libnvs.so and the real scheduler on the fake driver: a waiting program notices within
GEMSHARE_SCHEDULER_TIMEOUT_MS, says so once and runs unscheduled; when the scheduler answers
again both programs rejoin it (new registrations), and the turns go on."""

from __future__ import annotations

import os
import re
import signal
import time

import libnvs_fakelog as fakelog
from libnvs_programs import (NO_EARLY_RELEASE, scheduler_status, wait_file, wait_for,
                             wait_for_client)

TIMEOUT_MS = 1000
ENV = {"GEMSHARE_SCHEDULER_TIMEOUT_MS": str(TIMEOUT_MS), **NO_EARLY_RELEASE}


def client_ids(socket, pids) -> dict[int, int]:
    return {c["pid"]: c["id"] for c in scheduler_status(socket)["clients"] if c["pid"] in pids}


def test_a_stopped_scheduler_frees_its_waiters_and_both_rejoin_when_it_answers(gpu_with):
    # Nothing ends the holder's turn but the scheduler's silence: no quantum, no share.
    gpu, scheduler = gpu_with(tq=86400, min_slice_ms=3600000)
    holder = gpu.start(["init", "launch", 100, "sync", "touch-file", gpu.path("held"),
                        "wait-file", gpu.path("rejoined"), "launch", 100, "sync"], env=ENV)
    wait_file(gpu.path("held"))
    wait_for_client(gpu.socket, holder.pid, state="holding")
    waiter = gpu.start(["init", "launch", 100, "sync", "touch-file", gpu.path("ran"),
                        "wait-file", gpu.path("rejoined"), "launch", 100, "sync"], env=ENV)
    wait_for_client(gpu.socket, waiter.pid, state="waiting")
    before = client_ids(gpu.socket, {holder.pid, waiter.pid})

    stopped = time.monotonic_ns()  # CLOCK_MONOTONIC, the fake driver's clock
    os.kill(scheduler.process.pid, signal.SIGSTOP)
    try:
        wait_file(gpu.path("ran"))
        launch = fakelog.named(gpu.events(), "launch", pid=waiter.pid)[0].ns
        # A PING after a quarter of the timeout, then the whole timeout without an answer.
        assert 0.9 * TIMEOUT_MS <= (launch - stopped) / 1e6 <= 15 * TIMEOUT_MS, \
            (launch - stopped) / 1e6
        # The holder, which holds and hears nothing either, gives up too.
        wait_for(lambda: "has not answered" in holder.result().stderr, "the holder giving up")
    finally:
        os.kill(scheduler.process.pid, signal.SIGCONT)
        resumed = time.monotonic_ns()

    # Both rejoin: new registrations, not the stale connections.
    def rejoined():
        now = client_ids(gpu.socket, {holder.pid, waiter.pid})
        return now if len(now) == 2 and all(now[pid] != before[pid] for pid in now) else None
    again = wait_for(rejoined, "both programs registered again")
    gpu.path("rejoined").touch()
    results = {program.pid: program.wait() for program in (holder, waiter)}
    for result in results.values():
        assert result.returncode == 0, result.describe()
        # Each says once that the scheduler stopped answering, and once that it answers again.
        lines = result.gemshare_lines()
        assert len(lines) == 2, result.stderr
        assert "has not answered" in lines[0] and "GEMSHARE_SCHEDULER_TIMEOUT_MS" in lines[0], \
            result.stderr
        assert "answers again" in lines[1], result.stderr
    # The waiter says how long it ran unscheduled: from giving up (just before its launch) to
    # the answer, not from the PING the scheduler left unanswered a whole timeout earlier.
    unscheduled_ms = int(re.search(r"answers again after (\d+) ms running unscheduled",
                                   results[waiter.pid].stderr)[1])
    assert unscheduled_ms <= (resumed - launch) / 1e6 + TIMEOUT_MS / 2, results[waiter.pid].stderr

    # After the rejoin each asked for the lock again and was granted it once, in turns that
    # never overlap.
    log = scheduler.log()
    for pid, client in again.items():
        assert len(re.findall(rf"\bgrant client {client} \(pid {pid},", log)) == 1, log
    events = gpu.events()
    after = [e for e in fakelog.named(events, "launch") if e.ns > launch]
    assert {e.pid for e in after} == {holder.pid, waiter.pid}, after
    turns = [fakelog.exec_intervals(events, pid) for pid in (holder.pid, waiter.pid)]
    assert not any(a0 < b1 and b0 < a1 for a0, a1 in turns[0][-1:] for b0, b1 in turns[1][-1:])


def test_a_stopped_scheduler_replaced_by_a_new_one_is_rejoined_with_one_line_each(
        gpu_with, restartable):
    """As systemd's watchdog does: the stopped scheduler is killed and another started."""
    gpu, scheduler = gpu_with(tq=86400)
    program = gpu.start(["init", "launch", 100, "sync", "touch-file", gpu.path("held"),
                         "wait-file", gpu.path("replaced"), "launch", 100, "sync"], env=ENV)
    wait_file(gpu.path("held"))
    wait_for_client(gpu.socket, program.pid, state="holding")
    os.kill(scheduler.process.pid, signal.SIGSTOP)
    wait_for(lambda: "has not answered" in program.result().stderr, "the silence noticed")
    scheduler.process.kill()
    scheduler.stop()
    again = restartable(scheduler, tq=86400)
    wait_for_client(again.socket, program.pid)
    gpu.path("replaced").touch()
    result = program.wait()
    assert result.returncode == 0, result.describe()
    lines = result.gemshare_lines()
    assert len(lines) == 2 and "has not answered" in lines[0], result.stderr
    assert "answers again" in lines[1] and "replaced" in lines[1], result.stderr
    assert len(re.findall(rf"\bgrant client \d+ \(pid {program.pid},", again.log())) == 1
