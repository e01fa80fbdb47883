"""What a holder does when the scheduler takes the lock back (drop-lock): its queued work
finishes and its context is synchronized before the next holder submits anything, and it never
synchronizes inside a CUDA graph capture (which would ruin the capture)."""

from __future__ import annotations

import re

import libnvs_fakelog as fakelog
from libnvs_programs import client_of, grants, scheduler_status, wait_file, wait_for

NO_EARLY_RELEASE = {"GEMSHARE_IDLE_RELEASE_MS": "0"}  # only a drop-lock may move the lock


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


def test_a_drop_lock_during_a_graph_capture_never_synchronizes_inside_it(gpu_with):
    gpu, scheduler = gpu_with(tq=1)
    capturer = gpu.start(["init", "launch", 1000, "stream-sync", "stream-new",
                          "capture-begin", "global", "launch", 100, "launch", 100,
                          "touch-file", gpu.path("capturing"), "wait-file", gpu.path("dropped"),
                          "sleep-ms", 1500, "capture-end", "graph-launch", "sync"],
                         env=NO_EARLY_RELEASE)
    wait_file(gpu.path("capturing"))
    waiter = gpu.start(["init", "launch", 100, "sync"])
    wait_for(lambda: re.search(rf"drop client \d+ \(pid {capturer.pid},", scheduler.log()),
             "the scheduler to drop the capturing holder's lock")
    gpu.path("dropped").touch()
    captured = capturer.wait()
    assert waiter.wait().returncode == 0
    assert captured.returncode == 0, captured.describe()
    assert captured.ok("capture-end")["graph"] == "1"
    assert captured.ok("graph-launch")
    events = gpu.events()
    violations = fakelog.named(events, "capture_violation", "capture_invalidated",
                               pid=capturer.pid)
    assert not violations, f"libnvs synchronized inside the capture: {violations}"
    assert len(fakelog.exec_intervals(events, capturer.pid, {"kernel"})) == 3


def test_recording_a_graph_needs_no_lock_but_launching_it_does(gpu_with):
    """A capture's recorded launches are not GPU work: capturing while another process holds the
    lock must not deadlock, and the graph runs once the lock comes back."""
    gpu, scheduler = gpu_with(tq=86400)
    holder = gpu.start(["init", "launch", 100, "sync", "touch-file", gpu.path("held"),
                        "wait-file", gpu.path("release")], env=NO_EARLY_RELEASE)
    wait_file(gpu.path("held"))
    capturer = gpu.start(["init", "capture-graph", 2, 100, "touch-file", gpu.path("captured"),
                          "graph-launch", "sync"])
    wait_for(lambda: gpu.path("captured").exists() or capturer.process.poll() is not None,
             "the capture to finish while another process holds the lock")
    assert gpu.path("captured").exists(), capturer.result().describe()
    wait_for(lambda: (client_of(scheduler_status(scheduler.socket), capturer.pid) or {})
             .get("state") == "waiting", "the graph launch to wait for the lock")
    gpu.path("release").touch()
    assert holder.wait().returncode == 0
    result = capturer.wait()
    assert result.returncode == 0, result.describe()
