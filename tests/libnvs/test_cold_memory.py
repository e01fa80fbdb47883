"""Cold memory (libnvs/README.md, "Cold memory"): an allocation the program cleared whole to zeros
with a memset, 64 MiB or more, as a server clears its KV cache. It leaves the device only when
a move needs more than the rest of the memory, and then all of it, counted; once it has left,
every move out migrates it first (what the program faulted back), uncounted; a grant leaves it
on the host, and says only what came back; it is never copied to staging memory and
discarded, so what the program wrote into it since survives every move. Frames from the
scripted scheduler."""

from __future__ import annotations

from gemshare_nvs import protocol as p

import libnvs_fakelog as fakelog
from libnvs_programs import NO_EARLY_RELEASE

MiB = 1 << 20
DEVICE = "256M"  # room for a cache of 96 MiB, over the threshold of 64
ALLOCATIONS = ["alloc", "weights", "8M", "alloc", "cache", "96M", "memset", "cache", 0,
               "write", "weights", 7]


def two_turns_away(gpu, scheduler, env: dict | None = None, first_ask: int = 104 * MiB):
    """A program that clears its cache, is dropped for `first_ask` (by default all its memory,
    the cache's 96 MiB and the weights' 8), then for 8 MiB, and granted again each time,
    writing into its cache after the first return; its result, events, and the MOVED frames
    to the host and to the device, in order."""
    steps = ["init", *ALLOCATIONS, "launch", 100, "sync", "touch-file", gpu.path("ran"),
             "wait-file", gpu.path("again"), "write", "cache", 5, "launch", 100, "sync",
             "touch-file", gpu.path("ran-again"), "wait-file", gpu.path("last"),
             "check", "cache", 5, "check", "weights", 7, "launch", 100, "sync"]
    gpu.device_mem = DEVICE
    program = gpu.start(steps, env={**NO_EARLY_RELEASE, **(env or {})})
    scheduler.turn(program, gpu.path("ran"))
    for ask, go, ran in ((first_ask, gpu.path("again"), gpu.path("ran-again")),
                         (8 * MiB, gpu.path("last"), None)):
        scheduler.drop(program.pid, ask)
        scheduler.wait_for(program.pid, p.LockReleased, count=1 if ran else 2)
        if ran is None:
            result = scheduler.last_turn(program, go, others_ran=True)
            break
        go.touch()
        scheduler.turn(program, ran, others_ran=True)
    done = [frame for _, frame in scheduler.moved(result.pid, done=True)]
    return result, gpu.events(), done


def test_a_cleared_cache_leaves_when_needed_counts_once_and_stays_on_the_host(
        scripted_migrating):
    gpu, scheduler = scripted_migrating
    result, events, done = two_turns_away(gpu, scheduler)
    ptr = result.pointers()
    # The first move needs all of it: the weights, then the cache, on the device since its
    # clearing, counted. The second asks 8 MiB: the cache goes first, whatever was asked, but
    # what it has there is the page faults' (none here), so the 8 MiB come from the weights.
    assert fakelog.prefetched(events, result.pid, to_host=True) == \
        [(ptr["weights"], 8 * MiB), (ptr["cache"], 96 * MiB), (ptr["cache"], 96 * MiB),
         (ptr["weights"], 8 * MiB)]
    # Back: only the weights (after others ran, wherever they are); never the cache.
    assert fakelog.prefetched(events, result.pid, to_host=False) == [(ptr["weights"], 8 * MiB)] * 2
    # Each move says what it moved, and each grant what came back: never the cache.
    assert [(frame.flags & p.MOVED_TO_HOST, frame.bytes) for frame in done] == [
        (p.MOVED_TO_HOST, 104 * MiB), (0, 8 * MiB), (p.MOVED_TO_HOST, 8 * MiB), (0, 8 * MiB)]


def test_a_cleared_cache_stays_on_the_device_while_the_rest_makes_the_room_asked(
        scripted_migrating):
    # Its first move by the driver is the slowest of all (on an H200, a server's 24 GB cache at
    # 3.2-14 GB/s, where the rest goes by copy at 52): while the weights make the room, it
    # stays, and the grants have nothing of it to leave on the host.
    gpu, scheduler = scripted_migrating
    result, events, done = two_turns_away(gpu, scheduler, first_ask=8 * MiB)
    ptr = result.pointers()
    assert fakelog.prefetched(events, result.pid, to_host=True) == [(ptr["weights"], 8 * MiB)] * 2
    assert [(frame.flags & p.MOVED_TO_HOST, frame.bytes) for frame in done] == [
        (p.MOVED_TO_HOST, 8 * MiB), (0, 8 * MiB)] * 2


def test_what_the_program_faulted_back_of_a_cleared_cache_is_all_that_moves_out(
        scripted_migrating):
    gpu, scheduler = scripted_migrating
    # Moves at a rate, so that the fake counts what each migration and fault really moved.
    gpu.base_env.update(FAKECUDA_MIGRATE_GBPS="50")
    gpu.device_mem = DEVICE
    steps = ["init", *ALLOCATIONS, "launch", 100, "sync", "touch-file", gpu.path("ran"),
             "wait-file", gpu.path("again"), "fill-part", "cache", "32M", "4M", 9, "sync",
             "touch-file", gpu.path("ran-again"), "wait-file", gpu.path("last"), "launch", 100,
             "sync"]
    program = gpu.start(steps, env=NO_EARLY_RELEASE)
    scheduler.turn(program, gpu.path("ran"))
    for round_, ask in ((1, 104 * MiB), (2, 8 * MiB)):
        scheduler.drop(program.pid, ask)
        scheduler.wait_for(program.pid, p.LockReleased, count=round_)
        if round_ == 1:
            gpu.path("again").touch()
            scheduler.turn(program, gpu.path("ran-again"), others_ran=True)
    result = scheduler.last_turn(program, gpu.path("last"), others_ran=True)
    events = gpu.events()
    ptr = result.pointers()
    # The request wrote 4 MiB of the cache, on the host: the driver's faults brought those
    # pages back, and the next move out of the whole cache moved just them.
    faulted = [int(e["faulted"]) for e in events if e.pid == result.pid
               and e.name == "exec_end" and e.get("faulted", "0") != "0"]
    assert faulted == [4 * MiB], faulted
    cache_out = [e["seq"] for e in fakelog.prefetches(events, result.pid, to_host=True)
                 if int(e["ptr"], 16) == ptr["cache"]]
    moved = {e["seq"]: int(e["moved"]) for e in events if e.pid == result.pid
             and e.name == "exec_end" and e.get("op") == "prefetch"}
    assert [moved[seq] for seq in cache_out] == [96 * MiB, 4 * MiB]


def test_a_cleared_cache_is_never_staged_and_keeps_what_the_program_wrote(scripted):
    gpu, scheduler = scripted  # moves by copy to staging memory, where they can
    gpu.base_env.update(GEMSHARE_POPULATE="0")
    result, events, _ = two_turns_away(gpu, scheduler)
    ptr = result.pointers()
    checks = result.steps("check")  # the cache's 5s and the weights' 7s came through
    assert len(checks) == 2 and all(check["result"] == "0" for check in checks), checks
    cache = (ptr["cache"], ptr["cache"] + 96 * MiB)
    discarded = fakelog.discarded(events, result.pid)
    assert discarded, "the weights went out by copy: their pages were discarded"
    assert not [(at, size) for at, size in discarded if at < cache[1] and at + size > cache[0]]


def test_a_cache_cleared_in_part_or_a_small_one_is_moved_as_any_memory(scripted_migrating):
    gpu, scheduler = scripted_migrating
    steps = ["init", "alloc", "small", "8M", "memset", "small", 0, "alloc", "big", "96M",
             "memset-async", "big", 1, "launch", 100, "sync", "touch-file", gpu.path("ran"),
             "wait-file", gpu.path("again"), "launch", 100, "sync"]
    gpu.device_mem = DEVICE
    program = gpu.start(steps, env=NO_EARLY_RELEASE)
    scheduler.turn(program, gpu.path("ran"))
    scheduler.drop(program.pid, p.EVICT_ALL)
    scheduler.wait_for(program.pid, p.LockReleased)
    result = scheduler.last_turn(program, gpu.path("again"), others_ran=True)
    ptr = result.pointers()
    events = gpu.events()
    # Too small, and not cleared to zeros: both warm, out oldest first and back newest first.
    assert fakelog.prefetched(events, result.pid, to_host=True) == \
        [(ptr["small"], 8 * MiB), (ptr["big"], 96 * MiB)]
    assert fakelog.prefetched(events, result.pid, to_host=False) == \
        [(ptr["big"], 96 * MiB), (ptr["small"], 8 * MiB)]
