"""Bulk swap: a grant after a wait prefetches the process's converted allocations back to the
device on a stream of its own, newest first, while its first launches already run; a drop with
DROP_EVICT moves its managed memory to the host after the drain and before it answers. Never
inside a stream capture, never with GEMSHARE_UNIFIED_MEMORY=0.

Grants come from the real scheduler where it sends them on its own; DROP_EVICT, which it does not
send yet, and grants at moments a test must choose come from `scripted` (scripted_scheduler.py).
Prefetches here are always libnvs's: the stand-ins never prefetch themselves."""

from __future__ import annotations

import re
import time

from gemshare_nvs import protocol as p

import libnvs_fakelog as fakelog
from libnvs_programs import (NO_EARLY_RELEASE, run_together, start_holder, wait_file, wait_for,
                             wait_for_client)

NON_BLOCKING = "1"  # CU_STREAM_NON_BLOCKING


def pointers(result) -> dict[str, int]:
    """The device pointer of each named buffer the stand-in allocated."""
    found = {}
    for step in ("alloc", "alloc-async", "alloc-managed"):
        for fields in result.steps(step):
            found[fields["name"]] = int(fields["ptr"], 16)
    return found


def moved(events, pid: int, to_host: bool) -> list[int]:
    return [int(e["ptr"], 16) for e in fakelog.prefetches(events, pid, to_host)]


def swap_streams(events, pid: int) -> set[str]:
    """The streams libnvs created in the process (the stand-in's thread never runs there)."""
    return {e["stream"] for e in fakelog.named(events, "stream_create", pid=pid)
            if e.tid != pid and e["flags"] == NON_BLOCKING}


def after_wait_grants(scheduler_log: str, pid: int) -> int:
    return len(re.findall(rf"\bgrant client \d+ \(pid {pid},[^\n]* after waiting", scheduler_log))


def test_a_grant_after_a_wait_prefetches_newest_first_beside_the_first_launches(gpu_with):
    gpu, scheduler = gpu_with(tq=86400)
    holder = start_holder(gpu, ["alloc", "h", "1M", "launch", 100, "sync"])
    # Prefetches to the device last until "moved" exists: the launch must not wait for them.
    # The program syncs only after that, when all of them are queued; a sync before would not
    # wait for work submitted after it, and the process could exit with a prefetch still queued.
    waiter = gpu.start(["init", "alloc", "a", "1M", "alloc-async", "b", "2M", "alloc", "c", "3M",
                        "alloc-managed", "m", "1M", "launch", 100, "touch-file",
                        gpu.path("launched"), "wait-file", gpu.path("moved"), "sync"],
                       env={"FAKECUDA_PREFETCH_HOLD": str(gpu.path("moved")),
                            "GEMSHARE_SWAP_IN_WAIT": "0"})
    wait_for_client(scheduler.socket, waiter.pid, state="waiting")
    holder.kill()
    wait_file(gpu.path("launched"))
    wait_for(lambda: len(fakelog.prefetches(gpu.events(), waiter.pid, to_host=False)) == 3,
             "three prefetches queued")
    gpu.path("moved").touch()
    result = waiter.wait()
    assert result.returncode == 0, result.describe()
    assert after_wait_grants(scheduler.log(), waiter.pid) == 1, scheduler.log()

    events = gpu.events()
    ptr = pointers(result)
    # Converted memory only, newest first: the program's own managed buffer stays put.
    assert moved(events, waiter.pid, to_host=False) == [ptr["c"], ptr["b"], ptr["a"]]
    sent = fakelog.prefetches(events, waiter.pid, to_host=False)
    assert [int(e["size"]) for e in sent] == [3 << 20, 2 << 20, 1 << 20]
    assert {(e["stream"], e["stream_kind"]) for e in sent} == \
        {(stream, "created") for stream in swap_streams(events, waiter.pid)}, \
        "the prefetches did not go on one non-blocking stream libnvs created"
    (first_launch,) = fakelog.named(events, "launch", pid=waiter.pid)
    done = fakelog.exec_ends(events, waiter.pid)
    assert first_launch.ns < min(done[e["seq"]] for e in sent), \
        "the first launch waited for the prefetches"
    # The first holder was granted without waiting: nothing of it was moved.
    assert not moved(events, holder.pid, to_host=False)


def test_by_default_the_first_launch_waits_until_the_memory_is_back(gpu_with):
    gpu, scheduler = gpu_with(tq=86400)
    holder = start_holder(gpu, ["alloc", "h", "1M", "launch", 100, "sync"])
    waiter = gpu.start(["init", "alloc", "a", "1M", "alloc", "b", "2M", "launch", 100, "sync"],
                       env={"FAKECUDA_PREFETCH_HOLD": str(gpu.path("moved"))})
    wait_for_client(scheduler.socket, waiter.pid, state="waiting")
    holder.kill()
    wait_for(lambda: len(fakelog.prefetches(gpu.events(), waiter.pid, to_host=False)) == 2,
             "two prefetches queued")
    # The prefetches are held on the simulated device: the program's launch must be held too.
    wait_for(lambda: fakelog.named(gpu.events(), "exec_begin", pid=waiter.pid),
             "a prefetch running")
    time.sleep(0.3)
    assert not fakelog.named(gpu.events(), "launch", pid=waiter.pid)
    gpu.path("moved").touch()
    result = waiter.wait()
    assert result.returncode == 0, result.describe()

    events = gpu.events()
    sent = fakelog.prefetches(events, waiter.pid, to_host=False)
    done = fakelog.exec_ends(events, waiter.pid)
    (first_launch,) = fakelog.named(events, "launch", pid=waiter.pid)
    assert max(done[e["seq"]] for e in sent) < first_launch.ns


def test_every_grant_after_a_wait_is_followed_by_prefetches(gpu_with):
    gpu, scheduler = gpu_with(tq=1)
    # 1.5 s of work each in 1 s quanta: turns in both directions.
    results = run_together(gpu, ["alloc", "x", "1M", "alloc", "y", "2M",
                                 *["launch", 100_000, "stream-sync"] * 15])
    events = gpu.events()
    log = scheduler.log()
    for result in results:
        ptr = pointers(result)
        grants = after_wait_grants(log, result.pid)
        batches = moved(events, result.pid, to_host=False)
        assert batches == [ptr["y"], ptr["x"]] * grants, \
            f"pid {result.pid}: {grants} grants after a wait, prefetches {batches}"
        assert len(swap_streams(events, result.pid)) == (1 if grants else 0)
    assert sum(after_wait_grants(log, r.pid) for r in results) >= 2, log


def evict_and_return(gpu, scheduler, allocations: list, env: dict | None = None):
    """A holder with `allocations` and queued work is dropped with DROP_EVICT; another process
    runs; the holder is granted again after waiting. Its prefetches last until the test saw the
    eviction submitted or the release arrive. Returns (holder, next) results and the time
    LOCK_RELEASED arrived."""
    holder = gpu.start(["init", *allocations, "launches", 5, 100_000, "touch-file",
                        gpu.path("submitted"), "wait-file", gpu.path("again"), "launch", 100,
                        "sync"], env={**NO_EARLY_RELEASE, **(env or {}),
                                      "FAKECUDA_PREFETCH_HOLD": str(gpu.path("moved"))})
    scheduler.wait_for(holder.pid, p.RequestLock)
    scheduler.grant(holder.pid, after_wait=False)
    wait_file(gpu.path("submitted"))
    following = gpu.start(["init", "launch", 100, "sync"])
    scheduler.wait_for(following.pid, p.RequestLock)
    scheduler.send(holder.pid, p.DropLock(0, p.DROP_EVICT))
    wait_for(lambda: fakelog.prefetches(gpu.events(), holder.pid, to_host=True)
             or scheduler.received(holder.pid, p.LockReleased), "the eviction or the release")
    gpu.path("moved").touch()
    ((released_ns, released),) = scheduler.wait_for(holder.pid, p.LockReleased)
    assert released.reason == p.ReleaseReason.DROPPED
    scheduler.grant(following.pid, after_wait=True)
    after = following.wait()
    assert after.returncode == 0, after.describe()
    gpu.path("again").touch()
    scheduler.wait_for(holder.pid, p.RequestLock, count=2)
    scheduler.grant(holder.pid, after_wait=True)
    held = holder.wait()
    assert held.returncode == 0, held.describe()
    return held, after, released_ns


def test_drop_evict_moves_managed_memory_to_the_host_after_the_drain_before_releasing(scripted):
    gpu, scheduler = scripted
    held, after, released_ns = evict_and_return(
        gpu, scheduler, ["alloc", "a", "1M", "alloc-managed", "m", "2M", "alloc", "b", "3M"])
    events = gpu.events()
    ptr = pointers(held)
    evicted = fakelog.prefetches(events, held.pid, to_host=True)
    assert [int(e["ptr"], 16) for e in evicted] == [ptr["b"], ptr["m"], ptr["a"]], \
        "every managed allocation, the program's own included, newest first"

    kernels = fakelog.exec_intervals(events, held.pid, {"kernel"})
    drain_syncs = [e for e in fakelog.named(events, "ctx_sync", pid=held.pid)
                   if e.ns < evicted[0].ns]
    assert drain_syncs and drain_syncs[-1].ns > kernels[4][1], \
        "the memory moved before the queued work drained and the context was synchronized"
    done = fakelog.exec_ends(events, held.pid)
    assert max(done[e["seq"]] for e in evicted) < released_ns, \
        "LOCK_RELEASED went out before the memory reached the host"
    first_next = fakelog.named(events, "launch", pid=after.pid)[0]
    assert released_ns < first_next.ns

    # Granted again after waiting: its converted memory comes back, on the same stream.
    assert moved(events, held.pid, to_host=False) == [ptr["b"], ptr["a"]]
    streams = {e["stream"] for e in fakelog.prefetches(events, held.pid, to_host=True)
               + fakelog.prefetches(events, held.pid, to_host=False)}
    assert streams == swap_streams(events, held.pid) and len(streams) == 1


def test_without_unified_memory_nothing_is_moved(scripted):
    gpu, scheduler = scripted
    held, _, _ = evict_and_return(gpu, scheduler,
                                  ["alloc", "a", "1M", "alloc-managed", "m", "2M"],
                                  env={"GEMSHARE_UNIFIED_MEMORY": "0"})
    events = gpu.events()
    assert fakelog.named(events, "alloc_device", pid=held.pid), "the allocation was converted"
    assert not fakelog.prefetches(events, held.pid, to_host=True)
    assert not fakelog.prefetches(events, held.pid, to_host=False)
    assert not swap_streams(events, held.pid)


def test_only_what_fits_in_the_device_comes_back_newest_first(scripted):
    gpu, scheduler = scripted  # a 64 MiB device: 60 MiB (15/16) may come back
    program = gpu.start(["init", "alloc", "a", "40M", "alloc", "b", "2M", "alloc", "c", "30M",
                         "alloc", "d", "8M", "launch", 100, "sync"],
                        env={"GEMSHARE_ENABLE_SINGLE_OVERSUB": "1"})
    scheduler.wait_for(program.pid, p.RequestLock)
    scheduler.grant(program.pid, after_wait=True)
    result = program.wait()
    assert result.returncode == 0, result.describe()
    ptr = pointers(result)
    # d, c, b fill 40 MiB; a (40 MiB more) is left to page faults.
    assert moved(gpu.events(), program.pid, to_host=False) == [ptr["d"], ptr["c"], ptr["b"]]


def test_no_prefetch_while_a_stream_capture_runs(scripted):
    gpu, scheduler = scripted
    program = gpu.start(["init", "alloc", "a", "1M", "stream-new", "capture-begin", "global",
                         "launch", 100, "stream-default", "launch", 100, "touch-file",
                         gpu.path("launched"), "wait-file", gpu.path("end"), "stream-use", 1,
                         "capture-end", "sync", "touch-file", gpu.path("captured"), "wait-file",
                         gpu.path("again"), "launch", 100, "sync"], env=NO_EARLY_RELEASE)
    # The legacy-stream launch needs the lock; the grant comes while the capture runs.
    scheduler.wait_for(program.pid, p.RequestLock)
    scheduler.grant(program.pid, after_wait=True)
    wait_file(gpu.path("launched"))
    gpu.path("end").touch()
    wait_file(gpu.path("captured"))
    scheduler.send(program.pid, p.DropLock(0, 0))
    scheduler.wait_for(program.pid, p.LockReleased)
    gpu.path("again").touch()
    scheduler.wait_for(program.pid, p.RequestLock, count=2)
    scheduler.grant(program.pid, after_wait=True)
    result = program.wait()
    assert result.returncode == 0, result.describe()

    events = gpu.events()
    assert not fakelog.named(events, "capture_violation", "capture_invalidated",
                             pid=program.pid)
    (capture_end,) = fakelog.named(events, "capture_end", pid=program.pid)
    sent = fakelog.prefetches(events, program.pid, to_host=False)
    # Only the second grant, after the capture, prefetched.
    assert [int(e["ptr"], 16) for e in sent] == [pointers(result)["a"]]
    assert sent[0].ns > capture_end.ns


def test_the_swap_stream_dies_with_its_context_and_is_made_again(scripted):
    gpu, scheduler = scripted
    program = gpu.start(["init", "alloc", "a", "1M", "launch", 100, "sync", "touch-file",
                         gpu.path("ran"), "wait-file", gpu.path("reset"), "primary-reset",
                         "alloc", "b", "1M", "launch", 100, "sync"], env=NO_EARLY_RELEASE)
    scheduler.wait_for(program.pid, p.RequestLock)
    scheduler.grant(program.pid, after_wait=True)
    wait_file(gpu.path("ran"))
    scheduler.send(program.pid, p.DropLock(0, 0))
    scheduler.wait_for(program.pid, p.LockReleased)
    gpu.path("reset").touch()
    scheduler.wait_for(program.pid, p.RequestLock, count=2)
    scheduler.grant(program.pid, after_wait=True)
    result = program.wait()
    assert result.returncode == 0, result.describe()

    events = gpu.events()
    assert not fakelog.named(events, "stream_dead", pid=program.pid), \
        "libnvs used the stream the reset destroyed"
    sent = fakelog.prefetches(events, program.pid, to_host=False)
    ptr = pointers(result)
    assert [int(e["ptr"], 16) for e in sent] == [ptr["a"], ptr["b"]]
    assert sent[0]["stream"] != sent[1]["stream"]
    assert {e["stream"] for e in sent} == swap_streams(events, program.pid)
