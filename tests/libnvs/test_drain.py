"""What a holder does when the scheduler takes the lock back (drop-lock): its queued work
finishes and every context it used is synchronized before the next holder submits anything; a
holder that drains for longer than the grace period is revoked and recovers."""

from __future__ import annotations

import re

import libnvs_fakelog as fakelog
from libnvs_programs import NO_EARLY_RELEASE, grants, wait_file


def test_drop_lock_drains_and_synchronizes_before_the_next_holder_submits(gpu_with):
    gpu, scheduler = gpu_with(tq=1)
    # Two seconds of queued work when the one-second quantum ends.
    holder = gpu.start(["init", "launches", 20, 100_000, "touch-file", gpu.path("submitted"),
                        "wait-file", gpu.path("next-done")], env=NO_EARLY_RELEASE)
    wait_file(gpu.path("submitted"))
    following = gpu.run(["init", "launch", 100, "sync", "touch-file", gpu.path("next-done")])
    assert following.returncode == 0, following.describe()
    assert holder.wait().returncode == 0

    events = gpu.events()
    held = fakelog.exec_intervals(events, holder.pid)
    assert len(held) == 20
    last_end = held[-1][1]
    first_launch = fakelog.named(events, "launch", pid=following.pid)[0].ns
    syncs = [e for e in fakelog.named(events, "ctx_sync", pid=holder.pid)
             if last_end <= e.ns <= first_launch]
    assert last_end < first_launch, "the next holder submitted before the queue drained"
    assert syncs and all(e["result"] == "0" for e in syncs), \
        "no context synchronization between the drain and the next holder's first launch"
    log = scheduler.log()
    assert re.search(rf"drop client \d+ \(pid {holder.pid},", log), log
    assert re.search(rf"release client \d+ \(pid {holder.pid},.*after drop", log), log


def test_drop_lock_synchronizes_every_context_the_process_used(gpu_with):
    gpu, scheduler = gpu_with(tq=1)
    holder = gpu.start(["init", "ctx-create", "launches", 8, 100_000, "ctx-primary",
                        "launches", 8, 100_000, "touch-file", gpu.path("submitted"),
                        "wait-file", gpu.path("next-done")], env=NO_EARLY_RELEASE)
    wait_file(gpu.path("submitted"))
    following = gpu.run(["init", "launch", 100, "sync", "touch-file", gpu.path("next-done")])
    result = holder.wait()
    assert result.returncode == 0 and following.returncode == 0, result.describe()
    contexts = {result.ok("ctx-create")["ctx"], result.ok("ctx-primary")["ctx"]}
    events = gpu.events()
    last_end = fakelog.exec_intervals(events, holder.pid)[-1][1]
    first_launch = fakelog.named(events, "launch", pid=following.pid)[0].ns
    synced = {e["ctx"] for e in fakelog.named(events, "ctx_sync", pid=holder.pid)
              if last_end <= e.ns <= first_launch and e["result"] == "0"}
    assert synced >= contexts, f"contexts {contexts - synced} were not synchronized on drop"


def test_a_holder_revoked_for_draining_too_long_recovers(gpu_with):
    """A kernel longer than the grace period: the scheduler revokes the holder and lets the
    next process run; the holder finishes its work and takes its turn again afterwards."""
    gpu, scheduler = gpu_with(tq=1, grace_ms=500)
    holder = gpu.start(["init", "launch", 3_000_000, "touch-file", gpu.path("submitted"),
                        "wait-file", gpu.path("next-done"), "launch", 100, "sync"],
                       env=NO_EARLY_RELEASE)
    wait_file(gpu.path("submitted"))
    following = gpu.run(["init", "launch", 100, "sync", "touch-file", gpu.path("next-done")])
    assert following.returncode == 0, following.describe()
    result = holder.wait()
    assert result.returncode == 0, result.describe()
    log = scheduler.log()
    assert re.search(rf"revoke client \d+ \(pid {holder.pid},", log), log
    events = gpu.events()
    long_kernel = fakelog.exec_intervals(events, holder.pid)[0]
    (short_kernel,) = fakelog.exec_intervals(events, following.pid)
    assert long_kernel[0] < short_kernel[0] < long_kernel[1], \
        "the next process did not get the GPU when the holder was revoked"
    assert grants(log, holder.pid) == 2, log
