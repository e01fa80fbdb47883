"""Moving memory to the host: a DROP_LOCK with evict_bytes, or an EVICT while the process does not
hold the lock, moves that many bytes (rounded up to 2 MiB; EVICT_ALL: all) of its managed memory,
least recently allocated first, the last allocation split; in chunks spread over the move
streams, with MOVED progress while it lasts and one MOVED with MOVED_DONE at the end.

Every frame comes from `scripted_migrating` (scripted_scheduler.py: moves by copy off, so that
every move is a prefetch the fake logs; test_move_by_copy.py has the copies), so each test
chooses exactly what the process is asked and when. Prefetches here are always libnvs's: the
stand-ins never prefetch."""

from __future__ import annotations

from gemshare_nvs import protocol as p

import libnvs_fakelog as fakelog
from libnvs_programs import NO_EARLY_RELEASE

MiB = 1 << 20
TO_HOST_DONE = p.MOVED_TO_HOST | p.MOVED_DONE


def start_holding(gpu, scheduler, allocations: list, env: dict | None = None, then=()):
    """A program that allocates, takes the lock, runs, and once dropped and granted again runs
    `then` and one more launch. Returns it holding the lock after its first work."""
    program = gpu.start(["init", *allocations, "launch", 100, "sync", "touch-file",
                         gpu.path("ran"), "wait-file", gpu.path("again"), *then, "launch", 100,
                         "sync"], env={**NO_EARLY_RELEASE, **(env or {})})
    scheduler.turn(program, gpu.path("ran"))
    return program


def dropped(gpu, scheduler, allocations: list, evict_bytes: int, env: dict | None = None,
            then=()):
    """A holder dropped with `evict_bytes`, then granted again; its result and its events."""
    program = start_holding(gpu, scheduler, allocations, env, then)
    scheduler.drop(program.pid, evict_bytes)
    scheduler.wait_for(program.pid, p.LockReleased)
    result = scheduler.last_turn(program, gpu.path("again"))
    return result, gpu.events()


def test_a_drop_moves_what_it_asks_rounded_up_oldest_first_splitting_the_last(scripted_migrating):
    gpu, scheduler = scripted_migrating
    result, events = dropped(gpu, scheduler, ["alloc", "a", "3M", "alloc-managed", "m", "2M",
                                              "alloc", "b", "4M", "alloc", "c", "5M"],
                             evict_bytes=6 * MiB + 1)
    ptr = result.pointers()
    # 8 MiB: a and the program's own m whole, then the first 3 MiB of b; c stays.
    assert fakelog.prefetched(events, result.pid, to_host=True) == \
        [(ptr["a"], 3 * MiB), (ptr["m"], 2 * MiB), (ptr["b"], 3 * MiB)]
    done_ns, done = scheduler.moved(result.pid, done=True)[0]
    assert (done.flags, done.bytes) == (TO_HOST_DONE, 8 * MiB)
    assert done.elapsed_us > 0
    released_ns, _ = scheduler.received(result.pid, p.LockReleased)[0]
    assert done_ns < released_ns, "MOVED_DONE came after LOCK_RELEASED"
    host_done = fakelog.exec_ends(events, result.pid)
    assert all(host_done[e["seq"]] < released_ns
               for e in fakelog.prefetches(events, result.pid, to_host=True))


def test_a_drop_without_bytes_moves_nothing_and_says_nothing(scripted_migrating):
    gpu, scheduler = scripted_migrating
    result, events = dropped(gpu, scheduler, ["alloc", "a", "3M"], evict_bytes=0)
    assert not fakelog.prefetches(events, result.pid, to_host=True)
    assert not fakelog.prefetches(events, result.pid, to_host=False)
    assert not scheduler.received(result.pid, p.Moved)


def test_evict_all_moves_everything(scripted_migrating):
    gpu, scheduler = scripted_migrating
    result, events = dropped(gpu, scheduler, ["alloc", "a", "3M", "alloc-managed", "m", "2M",
                                              "alloc-async", "b", "1M"], evict_bytes=p.EVICT_ALL)
    ptr = result.pointers()
    assert fakelog.prefetched(events, result.pid, to_host=True) == \
        [(ptr["a"], 3 * MiB), (ptr["m"], 2 * MiB), (ptr["b"], 1 * MiB)]
    done = scheduler.wait_moved_done(result.pid)
    assert (done.flags, done.bytes) == (TO_HOST_DONE, 6 * MiB)


def test_a_slow_move_reports_progress_and_is_done_before_the_release(scripted_migrating):
    gpu, scheduler = scripted_migrating
    # 24 MiB at 20 MB/s: 1.26 s, each 6 MiB allocation a chunk of 0.31 s.
    program = start_holding(gpu, scheduler, [w for name in "abcd" for w in ("alloc", name, "6M")],
                            env={"FAKECUDA_MIGRATE_GBPS": "0.02"})
    scheduler.drop(program.pid, p.EVICT_ALL)
    ((released_ns, _),) = scheduler.wait_for(program.pid, p.LockReleased)
    scheduler.last_turn(program, gpu.path("again"))

    frames = [(ns, m) for ns, m in scheduler.moved(program.pid) if m.flags & p.MOVED_TO_HOST]
    progress = [m for _, m in frames if not m.flags & p.MOVED_DONE]
    done_ns, done = frames[-1]
    assert (done.flags, done.bytes) == (TO_HOST_DONE, 24 * MiB)
    assert done.elapsed_us >= 1_200_000
    assert done_ns < released_ns
    assert len(progress) >= 3, frames
    assert all(m.flags == p.MOVED_TO_HOST for m in progress)
    assert [m.bytes for m in progress] == sorted(m.bytes for m in progress)
    assert 0 < progress[-1].bytes < 24 * MiB and all(m.bytes % (6 * MiB) == 0 for m in progress)
    assert [m.elapsed_us for m in progress] == sorted(m.elapsed_us for m in progress)
    # At least every 500 ms while moving (with slack for a loaded machine).
    gaps = [b - a for (a, _), (b, _) in zip(frames, frames[1:])]
    assert max(gaps) < 1_000_000_000, gaps


def test_evict_while_not_holding_moves_and_answers_without_moving_anything_twice(
        scripted_migrating):
    gpu, scheduler = scripted_migrating
    program = start_holding(gpu, scheduler, ["alloc", "a", "3M", "alloc", "b", "3M"])
    scheduler.drop(program.pid)
    scheduler.wait_for(program.pid, p.LockReleased)
    scheduler.evict(program.pid, 2 * MiB)
    first = scheduler.wait_moved_done(program.pid)
    scheduler.evict(program.pid, 1)  # rounded up to 2 MiB
    second = scheduler.wait_moved_done(program.pid, count=2)
    result = scheduler.last_turn(program, gpu.path("again"))

    assert (first.flags, first.bytes) == (second.flags, second.bytes) == (TO_HOST_DONE, 2 * MiB)
    ptr = result.pointers()
    events = gpu.events()
    assert fakelog.prefetched(events, result.pid, to_host=True) == \
        [(ptr["a"], 2 * MiB), (ptr["a"] + 2 * MiB, 1 * MiB), (ptr["b"], 1 * MiB)]
    assert len(scheduler.received(result.pid, p.LockReleased)) == 1, "EVICT is no release"
    # Granted without GRANT_OTHERS_RAN: what it moved out comes back all the same.
    assert [a for a, _ in fakelog.prefetched(events, result.pid, to_host=False)] == \
        [ptr["b"], ptr["a"]]


def test_evict_while_holding_or_without_unified_memory_moves_nothing(scripted_migrating):
    gpu, scheduler = scripted_migrating
    program = start_holding(gpu, scheduler, ["alloc", "a", "3M"])
    scheduler.evict(program.pid, p.EVICT_ALL)
    held = scheduler.wait_moved_done(program.pid)
    scheduler.drop(program.pid)
    scheduler.wait_for(program.pid, p.LockReleased)
    result = scheduler.last_turn(program, gpu.path("again"))
    assert (held.flags, held.bytes) == (TO_HOST_DONE, 0)
    assert not fakelog.prefetches(gpu.events(), result.pid, to_host=True)

    plain = gpu.start(["init", "alloc", "a", "3M", "launch", 100, "sync", "touch-file",
                       gpu.path("plain-ran"), "wait-file", gpu.path("plain-end")],
                      env={**NO_EARLY_RELEASE, "GEMSHARE_UNIFIED_MEMORY": "0"})
    scheduler.turn(plain, gpu.path("plain-ran"))
    scheduler.drop(plain.pid, p.EVICT_ALL)
    scheduler.wait_for(plain.pid, p.LockReleased)
    scheduler.evict(plain.pid, p.EVICT_ALL)
    scheduler.wait_moved_done(plain.pid, count=2)
    gpu.path("plain-end").touch()
    assert plain.wait().returncode == 0
    assert [(m.flags, m.bytes) for _, m in scheduler.moved(plain.pid)] == [(TO_HOST_DONE, 0)] * 2
    assert not fakelog.prefetches(gpu.events(), plain.pid, to_host=True)


def test_moves_are_chunked_over_the_move_streams(scripted_migrating):
    gpu, scheduler = scripted_migrating
    result, events = dropped(gpu, scheduler, ["alloc", "big", "1G"], evict_bytes=p.EVICT_ALL,
                             env={"GEMSHARE_MOVE_STREAMS": "3",
                                  "GEMSHARE_ENABLE_SINGLE_OVERSUB": "1"})
    big = result.pointers()["big"]
    sent = fakelog.prefetches(events, result.pid, to_host=True)
    assert [(int(e["ptr"], 16), int(e["size"])) for e in sent] == \
        [(big + i * 256 * MiB, 256 * MiB) for i in range(4)]
    streams = [e["stream"] for e in sent]
    assert len(set(streams[:3])) == 3 and streams[3] == streams[0], "not round robin over 3"
    assert set(streams) == fakelog.library_streams(events, result.pid)


def test_a_refused_prefetch_reports_what_moved_and_loses_nothing(scripted_migrating):
    gpu, scheduler = scripted_migrating
    # Host memory for 5 MiB of moves: a (3 MiB) goes, b (3 MiB more) is refused.
    result, events = dropped(
        gpu, scheduler, ["alloc", "a", "3M", "write", "a", 17, "alloc", "b", "3M", "write", "b",
                         34], evict_bytes=p.EVICT_ALL,
        env={"FAKECUDA_HOST_PREFETCH_LIMIT": "5M"}, then=["check", "a", 17, "check", "b", 34])
    ptr = result.pointers()
    assert fakelog.prefetched(events, result.pid, to_host=True) == [(ptr["a"], 3 * MiB)]
    (refused,) = fakelog.named(events, "prefetch_refused", pid=result.pid)
    assert int(refused["ptr"], 16) == ptr["b"]
    done = scheduler.wait_moved_done(result.pid)
    assert (done.flags, done.bytes) == (TO_HOST_DONE | p.MOVED_FAILED, 3 * MiB)
    assert any("cuMemPrefetchAsync" in line and "failed" in line
               for line in result.gemshare_lines()), result.stderr
    assert [c["ok"] for c in result.steps("check")] == ["1", "1"]
