"""libnvs.so and CUDA graph stream capture: a drop-lock never synchronizes inside a capture
(the driver would invalidate it), recording a graph is not GPU work, and a capturing thread's
real work on other streams still needs the lock."""

from __future__ import annotations

import re

import pytest

import libnvs_fakelog as fakelog
from libnvs_programs import (NO_EARLY_RELEASE, start_holder, state_of, wait_file, wait_for,
                             wait_for_client)


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


# Captures that only record: on a stream of their own, or on the per-thread default stream.
RECORDINGS = {
    "created-stream": (False, ["capture-graph", 2, 100]),
    "per-thread-default-stream": (True, ["capture-begin", "global", "launch", 100, "launch", 100,
                                         "capture-end"]),
}


@pytest.mark.parametrize("recording", RECORDINGS)
def test_recording_a_graph_needs_no_lock_but_launching_it_does(gpu_with, recording):
    """A capture's recorded launches are not GPU work: capturing while another process holds the
    lock must not deadlock, and the graph runs once the lock comes back."""
    gpu, scheduler = gpu_with(tq=86400)
    holder = start_holder(gpu)
    per_thread, steps = RECORDINGS[recording]
    capturer = gpu.start(["init", *steps, "touch-file", gpu.path("captured"), "graph-launch",
                          "sync"], ptsz=per_thread)
    wait_for(lambda: gpu.path("captured").exists() or capturer.process.poll() is not None,
             "the capture to finish while another process holds the lock")
    assert gpu.path("captured").exists(), capturer.result().describe()
    wait_for_client(scheduler.socket, capturer.pid, state="waiting")
    assert not fakelog.exec_intervals(gpu.events(), capturer.pid)
    holder.kill()
    result = capturer.wait()
    assert result.returncode == 0, result.describe()
    assert len(fakelog.exec_intervals(gpu.events(), capturer.pid, {"kernel"})) == 2


# Real work the capturing thread submits elsewhere: another created stream, the legacy stream
# (the capture stream is non-blocking, so the legacy stream may run beside it).
ELSEWHERE = {"other-stream": ["stream-new"], "legacy-stream": ["stream-default"]}


@pytest.mark.parametrize("elsewhere", ELSEWHERE)
def test_a_capturing_thread_s_work_on_another_stream_still_waits_for_the_lock(gpu_with,
                                                                             elsewhere):
    """Capture makes work on the capturing stream a recording; the same thread's launch on an
    ordinary stream is GPU work and must not run while another process holds the lock."""
    gpu, scheduler = gpu_with(tq=86400)
    holder = start_holder(gpu)
    capturer = gpu.start(["init", "stream-new", "capture-begin", "global", "launch", 100,
                          *ELSEWHERE[elsewhere], "launch", 100, "touch-file",
                          gpu.path("launched"), "stream-use", 1, "capture-end", "sync"])

    def waiting_or_launched():
        if gpu.path("launched").exists():
            return "launched"
        return "waiting" if state_of(scheduler.socket, capturer.pid) == "waiting" else None

    outcome = wait_for(waiting_or_launched, "the other launch to wait or to run")
    ran = fakelog.exec_intervals(gpu.events(), capturer.pid, {"kernel"})
    holder.kill()
    result = capturer.wait()
    assert result.returncode == 0, result.describe()
    assert outcome == "waiting" and not ran, \
        "a launch on a non-capturing stream ran while another process held the GPU lock"
