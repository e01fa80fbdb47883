"""Bulk swap: a grant prefetches the process's converted allocations back to the device, newest
first, on streams of its own, when it moved memory out since it last held the lock or the grant
carries GRANT_OTHERS_RAN (GRANT_AFTER_WAIT alone does not), and reports what came back with
MOVED; a drop with evict_bytes moves managed memory to the host after the drain and before it
answers (test_move_out.py has the details of moving out). Never inside a stream capture, never
with GEMSHARE_UNIFIED_MEMORY=0.

Frames come from `scripted_migrating` (scripted_scheduler.py: moves by copy off, so that every
move is a prefetch the fake logs), which lets each test choose the grant flags; one test runs the
real scheduler end to end. Prefetches here are always libnvs's: the stand-ins never prefetch
themselves."""

from __future__ import annotations

import time

from gemshare_nvs import protocol as p

import libnvs_fakelog as fakelog
from libnvs_programs import NO_EARLY_RELEASE, grants, run_together, wait_file, wait_for

MiB = 1 << 20
MOVE_STREAMS = 4  # GEMSHARE_MOVE_STREAMS's default


def moved(events, pid: int, to_host: bool) -> list[int]:
    return [ptr for ptr, _ in fakelog.prefetched(events, pid, to_host)]


def test_a_grant_with_others_ran_prefetches_newest_first_beside_the_first_launches(
        scripted_migrating):
    gpu, scheduler = scripted_migrating
    # Prefetches to the device last until "moved" exists: the launch must not wait for them.
    # The program syncs only after that, when all of them are queued; a sync before would not
    # wait for work submitted after it, and the process could exit with a prefetch still queued.
    program = gpu.start(["init", "alloc", "a", "1M", "alloc-async", "b", "2M", "alloc", "c", "3M",
                         "alloc-managed", "m", "1M", "launch", 100, "touch-file",
                         gpu.path("launched"), "wait-file", gpu.path("moved"), "sync"],
                        env={"FAKECUDA_PREFETCH_HOLD": str(gpu.path("moved")),
                             "GEMSHARE_SWAP_IN_WAIT": "0"})
    scheduler.wait_for(program.pid, p.RequestLock)
    scheduler.grant(program.pid, others_ran=True)
    wait_file(gpu.path("launched"))
    wait_for(lambda: len(fakelog.prefetches(gpu.events(), program.pid, to_host=False)) == 3,
             "three prefetches queued")
    gpu.path("moved").touch()
    result = program.wait()
    assert result.returncode == 0, result.describe()

    events = gpu.events()
    ptr = result.pointers()
    # Converted memory only, newest first: the program's own managed buffer stays put.
    assert fakelog.prefetched(events, result.pid, to_host=False) == \
        [(ptr["c"], 3 * MiB), (ptr["b"], 2 * MiB), (ptr["a"], 1 * MiB)]
    sent = fakelog.prefetches(events, result.pid, to_host=False)
    streams = fakelog.library_streams(events, result.pid)
    assert len(streams) == MOVE_STREAMS
    assert len({e["stream"] for e in sent}) == 3 and {e["stream"] for e in sent} <= streams, \
        "the prefetches were not spread over non-blocking streams libnvs created"
    assert {e["stream_kind"] for e in sent} == {"created"}
    (first_launch,) = fakelog.named(events, "launch", pid=result.pid)
    done = fakelog.exec_ends(events, result.pid)
    assert first_launch.ns < min(done[e["seq"]] for e in sent), \
        "the first launch waited for the prefetches"
    assert not scheduler.received(result.pid, p.Moved), "MOVED for a move it did not wait for"


def test_by_default_the_first_launch_waits_until_the_memory_is_back(scripted_migrating):
    gpu, scheduler = scripted_migrating
    program = gpu.start(["init", "alloc", "a", "1M", "alloc", "b", "2M", "launch", 100, "sync"],
                        env={"FAKECUDA_PREFETCH_HOLD": str(gpu.path("moved"))})
    scheduler.wait_for(program.pid, p.RequestLock)
    scheduler.grant(program.pid, others_ran=True)
    wait_for(lambda: len(fakelog.prefetches(gpu.events(), program.pid, to_host=False)) == 2,
             "two prefetches queued")
    # The prefetches are held on the simulated device: the program's launch must be held too.
    wait_for(lambda: fakelog.named(gpu.events(), "exec_begin", pid=program.pid),
             "a prefetch running")
    time.sleep(0.3)
    assert not fakelog.named(gpu.events(), "launch", pid=program.pid)
    gpu.path("moved").touch()
    result = program.wait()
    assert result.returncode == 0, result.describe()

    events = gpu.events()
    sent = fakelog.prefetches(events, result.pid, to_host=False)
    done = fakelog.exec_ends(events, result.pid)
    (first_launch,) = fakelog.named(events, "launch", pid=result.pid)
    assert max(done[e["seq"]] for e in sent) < first_launch.ns
    # Nothing had been moved out by the program itself: the prefetch may have found its memory
    # in place, so it reports no move (a rate from it would be fiction), only progress.
    assert [m for _, m in scheduler.received(result.pid, p.Moved) if m.flags & p.MOVED_DONE] == []


def test_every_grant_after_a_move_out_prefetches_back_before_the_first_launch(scripted_migrating):
    gpu, scheduler = scripted_migrating
    turns = 3
    program = gpu.start(["init", "alloc", "x", "1M", "alloc", "y", "2M",
                         *[w for i in range(turns) for w in (
                             "launch", 100, "sync", "touch-file", gpu.path(f"ran-{i}"),
                             "wait-file", gpu.path(f"go-{i}"))]], env=NO_EARLY_RELEASE)
    asked = [p.EVICT_ALL, 1]  # all 3 MiB; then 1 byte, rounded up to 2 MiB
    for turn in range(turns):
        # No flags: only its own moves bring the memory back.
        scheduler.turn(program, gpu.path(f"ran-{turn}"))
        if turn < len(asked):
            scheduler.drop(program.pid, asked[turn])
            scheduler.wait_for(program.pid, p.LockReleased, count=turn + 1)
        gpu.path(f"go-{turn}").touch()
    result = program.wait()
    assert result.returncode == 0, result.describe()

    events = gpu.events()
    ptr = result.pointers()
    assert moved(events, result.pid, to_host=True) == [ptr["x"], ptr["y"], ptr["x"], ptr["y"]]
    back = fakelog.prefetches(events, result.pid, to_host=False)
    assert [int(e["ptr"], 16) for e in back] == [ptr["y"], ptr["x"]] * 2
    launches = fakelog.named(events, "launch", pid=result.pid)
    done = fakelog.exec_ends(events, result.pid)
    for turn in (1, 2):
        batch = back[2 * (turn - 1):2 * turn]
        assert launches[turn - 1].ns < batch[0].ns and \
            max(done[e["seq"]] for e in batch) < launches[turn].ns, f"turn {turn}"
    # Reported as what had been moved out (2 moves each way).
    scheduler.wait_moved_done(result.pid, count=4)
    assert [(m.flags, m.bytes) for _, m in scheduler.moved(result.pid)
            if not m.flags & p.MOVED_TO_HOST] == [(p.MOVED_DONE, 3 * MiB), (p.MOVED_DONE, 2 * MiB)]


def test_a_grant_without_moves_or_others_ran_does_not_prefetch(scripted_migrating):
    gpu, scheduler = scripted_migrating
    program = gpu.start(["init", "alloc", "a", "1M", "launch", 100, "sync", "touch-file",
                         gpu.path("ran"), "wait-file", gpu.path("again"), "launch", 100, "sync"],
                        env=NO_EARLY_RELEASE)
    scheduler.turn(program, gpu.path("ran"), after_wait=True)
    scheduler.drop(program.pid)
    scheduler.wait_for(program.pid, p.LockReleased)
    result = scheduler.last_turn(program, gpu.path("again"), after_wait=True)
    assert not fakelog.prefetches(gpu.events(), result.pid, to_host=False)
    assert not fakelog.library_streams(gpu.events(), result.pid)
    assert not scheduler.received(result.pid, p.Moved)


def test_with_the_scheduler_every_grant_after_the_first_brings_the_memory_back(
        gpu_with_migrating):
    gpu, scheduler = gpu_with_migrating(tq=1)  # the order of the driver's migrations is watched
    # 1.5 s of work each in 1 s quanta: turns in both directions. Every grant after a process's
    # first follows another's turn, so it carries GRANT_OTHERS_RAN.
    results = run_together(gpu, ["alloc", "x", "1M", "alloc", "y", "2M",
                                 *["launch", 100_000, "stream-sync"] * 15])
    events = gpu.events()
    log = scheduler.log()
    for result in results:
        ptr = result.pointers()
        returns = grants(log, result.pid) - 1
        batches = moved(events, result.pid, to_host=False)
        assert batches == [ptr["y"], ptr["x"]] * returns, \
            f"pid {result.pid}: {returns} grants after its first, prefetches {batches}"
    assert sum(grants(log, r.pid) for r in results) >= 3, log


def evict_and_return(gpu, scheduler, allocations: list, env: dict | None = None):
    """A holder with `allocations` and queued work is dropped with EVICT_ALL; another process
    runs; the holder is granted again. Its prefetches last until the test saw the eviction
    submitted or the release arrive. Returns (holder, next) results and the time LOCK_RELEASED
    arrived."""
    holder = gpu.start(["init", *allocations, "launches", 5, 100_000, "touch-file",
                        gpu.path("submitted"), "wait-file", gpu.path("again"), "launch", 100,
                        "sync"], env={**NO_EARLY_RELEASE, **(env or {}),
                                      "FAKECUDA_PREFETCH_HOLD": str(gpu.path("moved"))})
    scheduler.wait_for(holder.pid, p.RequestLock)
    scheduler.grant(holder.pid)
    wait_file(gpu.path("submitted"))
    following = gpu.start(["init", "launch", 100, "sync"])
    scheduler.wait_for(following.pid, p.RequestLock)
    scheduler.drop(holder.pid, p.EVICT_ALL)
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
    scheduler.grant(holder.pid, after_wait=True, others_ran=True)
    held = holder.wait()
    assert held.returncode == 0, held.describe()
    return held, after, released_ns


def test_a_drop_moves_managed_memory_to_the_host_after_the_drain_before_releasing(
        scripted_migrating):
    gpu, scheduler = scripted_migrating
    held, after, released_ns = evict_and_return(
        gpu, scheduler, ["alloc", "a", "1M", "alloc-managed", "m", "2M", "alloc", "b", "3M"])
    events = gpu.events()
    ptr = held.pointers()
    evicted = fakelog.prefetches(events, held.pid, to_host=True)
    assert [int(e["ptr"], 16) for e in evicted] == [ptr["a"], ptr["m"], ptr["b"]], \
        "every managed allocation, the program's own included, oldest first"

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

    # Granted again: its converted memory comes back, on the same streams.
    assert moved(events, held.pid, to_host=False) == [ptr["b"], ptr["a"]]
    streams = {e["stream"] for e in fakelog.prefetches(events, held.pid, to_host=True)
               + fakelog.prefetches(events, held.pid, to_host=False)}
    assert len(streams) == 3 and streams <= fakelog.library_streams(events, held.pid)
    assert len(fakelog.library_streams(events, held.pid)) == MOVE_STREAMS


def test_without_unified_memory_nothing_is_moved(scripted_migrating):
    gpu, scheduler = scripted_migrating
    held, _, _ = evict_and_return(gpu, scheduler,
                                  ["alloc", "a", "1M", "alloc-managed", "m", "2M"],
                                  env={"GEMSHARE_UNIFIED_MEMORY": "0"})
    events = gpu.events()
    assert fakelog.named(events, "alloc_device", pid=held.pid), "the allocation was converted"
    assert not fakelog.prefetches(events, held.pid, to_host=True)
    assert not fakelog.prefetches(events, held.pid, to_host=False)
    assert not fakelog.library_streams(events, held.pid)
    # Asked to move, it says it moved nothing.
    assert [(m.flags, m.bytes) for _, m in scheduler.received(held.pid, p.Moved)] == \
        [(p.MOVED_TO_HOST | p.MOVED_DONE, 0)]


def test_only_what_fits_in_the_device_comes_back_newest_first(scripted_migrating):
    gpu, scheduler = scripted_migrating  # a 64 MiB device: 60 MiB (15/16) may come back
    program = gpu.start(["init", "alloc", "a", "40M", "alloc", "b", "2M", "alloc", "c", "30M",
                         "alloc", "d", "8M", "launch", 100, "sync"],
                        env={"GEMSHARE_ENABLE_SINGLE_OVERSUB": "1"})
    scheduler.wait_for(program.pid, p.RequestLock)
    scheduler.grant(program.pid, others_ran=True)
    result = program.wait()
    assert result.returncode == 0, result.describe()
    ptr = result.pointers()
    # d, c, b fill 40 MiB; a (40 MiB more) is left to page faults.
    assert moved(gpu.events(), program.pid, to_host=False) == [ptr["d"], ptr["c"], ptr["b"]]


def test_no_prefetch_while_a_stream_capture_runs(scripted_migrating):
    gpu, scheduler = scripted_migrating
    program = gpu.start(["init", "alloc", "a", "1M", "stream-new", "capture-begin", "global",
                         "launch", 100, "stream-default", "launch", 100, "touch-file",
                         gpu.path("launched"), "wait-file", gpu.path("end"), "stream-use", 1,
                         "capture-end", "sync", "touch-file", gpu.path("captured"), "wait-file",
                         gpu.path("again"), "launch", 100, "sync"], env=NO_EARLY_RELEASE)
    # The legacy-stream launch needs the lock; the grant comes while the capture runs.
    scheduler.wait_for(program.pid, p.RequestLock)
    scheduler.grant(program.pid, others_ran=True)
    wait_file(gpu.path("launched"))
    gpu.path("end").touch()
    wait_file(gpu.path("captured"))
    scheduler.drop(program.pid)
    scheduler.wait_for(program.pid, p.LockReleased)
    gpu.path("again").touch()
    scheduler.wait_for(program.pid, p.RequestLock, count=2)
    scheduler.grant(program.pid, others_ran=True)
    result = program.wait()
    assert result.returncode == 0, result.describe()

    events = gpu.events()
    assert not fakelog.named(events, "capture_violation", "capture_invalidated",
                             pid=program.pid)
    (capture_end,) = fakelog.named(events, "capture_end", pid=program.pid)
    sent = fakelog.prefetches(events, program.pid, to_host=False)
    # Only the second grant, after the capture, prefetched.
    assert [int(e["ptr"], 16) for e in sent] == [result.pointers()["a"]]
    assert sent[0].ns > capture_end.ns


def test_the_move_streams_die_with_their_context_and_are_made_again(scripted_migrating):
    gpu, scheduler = scripted_migrating
    program = gpu.start(["init", "alloc", "a", "1M", "launch", 100, "sync", "touch-file",
                         gpu.path("ran"), "wait-file", gpu.path("reset"), "primary-reset",
                         "alloc", "b", "1M", "launch", 100, "sync"], env=NO_EARLY_RELEASE)
    scheduler.turn(program, gpu.path("ran"), others_ran=True)
    scheduler.drop(program.pid)
    scheduler.wait_for(program.pid, p.LockReleased)
    result = scheduler.last_turn(program, gpu.path("reset"), others_ran=True)

    events = gpu.events()
    assert not fakelog.named(events, "stream_dead", pid=program.pid), \
        "libnvs used the stream the reset destroyed"
    sent = fakelog.prefetches(events, program.pid, to_host=False)
    ptr = result.pointers()
    assert [int(e["ptr"], 16) for e in sent] == [ptr["a"], ptr["b"]]
    streams = fakelog.library_streams(events, program.pid)
    assert len(streams) == 2 * MOVE_STREAMS, "the streams were not made again after the reset"
    assert sent[0]["stream"] != sent[1]["stream"] and {e["stream"] for e in sent} <= streams
