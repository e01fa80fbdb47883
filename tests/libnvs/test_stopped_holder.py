"""A holder stopped (SIGSTOP) past its grace is revoked and the next program runs; when it
resumes, what its threads submit before its client thread has run once more still reaches the
driver (the bound libnvs/README.md documents, under Limits), and nothing after that: from the
client thread's drain on, none of its work reaches the driver while the new holder holds."""

from __future__ import annotations

import os
import signal
import time

import libnvs_fakelog as fakelog
from libnvs_programs import NO_EARLY_RELEASE, wait_file, wait_for_client

LOOP = ["launch", 1000, "sync"] * 3000  # a few seconds of short kernels, one after another
LONG_US = 800_000  # the new holder's kernel: it holds the device at least this long


def test_a_resumed_holder_submits_nothing_after_its_drain_while_the_new_holder_holds(gpu_with):
    gpu, scheduler = gpu_with(tq=1, grace_ms=300)
    holder = gpu.start(["init", "launch", 100, "sync", "touch-file", gpu.path("held"), *LOOP],
                       env=NO_EARLY_RELEASE)
    wait_file(gpu.path("held"))
    wait_for_client(gpu.socket, holder.pid, state="holding")
    os.kill(holder.pid, signal.SIGSTOP)
    try:
        waiter = gpu.start(["init", "launch", 100, "sync", "touch-file", gpu.path("granted"),
                            "launch", LONG_US, "sync"], env=NO_EARLY_RELEASE)
        wait_file(gpu.path("granted"))  # the stopped holder was revoked
        time.sleep(0.1)
    finally:
        resumed = time.monotonic_ns()
        os.kill(holder.pid, signal.SIGCONT)
    for result in (waiter.wait(), holder.wait()):
        assert result.returncode == 0, result.describe()

    events = gpu.events()
    main_tid = fakelog.named(events, "launch", pid=holder.pid)[0].tid
    drain = min(e.ns for e in fakelog.named(events, "ctx_sync", pid=holder.pid)
                if e.tid != main_tid and e.ns > resumed)
    long_begin, long_end = max(fakelog.exec_intervals(events, waiter.pid),
                               key=lambda interval: interval[1] - interval[0])
    assert long_begin < resumed < long_end, (long_begin, resumed, long_end)
    holder_launches = [e.ns for e in fakelog.named(events, "launch", pid=holder.pid)]
    assert not [t for t in holder_launches if drain < t < long_end], (drain, long_end)
    # It went on after the new holder was done: its loop ended.
    assert max(holder_launches) > long_end
