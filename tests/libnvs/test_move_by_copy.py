"""Moving converted memory off the device by copy: the bytes go to pinned staging memory and the
device pages are discarded (the fake overwrites discarded memory, so a program that ran before
its memory came back would read the wrong bytes). The program's own managed memory still
migrates. What is staged is back before the program runs again, whichever way it runs: a grant,
mode off, or the scheduler gone. Frames come from `scripted` (scripted_scheduler.py)."""

from __future__ import annotations

import re

from gemshare_nvs import protocol as p

import libnvs_fakelog as fakelog
from libnvs_programs import run_together, wait_for
from test_move_out import TO_HOST_DONE, dropped, start_holding

MiB = 1 << 20
WRITTEN = ["alloc", "a", "3M", "write", "a", 17, "alloc-managed", "m", "2M", "alloc", "b", "4M",
           "write", "b", 34]
CHECKED = ["check", "a", 17, "check", "b", 34]


def checks(result) -> list[str]:
    return [c["ok"] for c in result.steps("check")]


def test_converted_memory_goes_by_copy_and_comes_back_intact(scripted):
    gpu, scheduler = scripted
    result, events = dropped(gpu, scheduler, WRITTEN, evict_bytes=p.EVICT_ALL, then=CHECKED)
    ptr = result.pointers()
    # Converted a and b by copy and discard; the program's own m by migration.
    assert fakelog.discarded(events, result.pid) == [(ptr["a"], 3 * MiB), (ptr["b"], 4 * MiB)]
    assert fakelog.prefetched(events, result.pid, to_host=True) == [(ptr["m"], 2 * MiB)]
    assert fakelog.named(events, "host_register", pid=result.pid), "no pinned staging memory"
    done = scheduler.wait_moved_done(result.pid)
    assert (done.flags, done.bytes) == (TO_HOST_DONE, 9 * MiB)
    # Back on the grant: each staged range prefetched to the device, before the program's checks.
    back = [(a, n) for a, n in fakelog.prefetched(events, result.pid, to_host=False)]
    assert (ptr["a"], 3 * MiB) in back and (ptr["b"], 4 * MiB) in back
    assert checks(result) == ["1", "1"]


def test_many_handoffs_with_the_real_scheduler_keep_every_byte(gpu_with):
    gpu, scheduler = gpu_with(device_mem="64M", tq=1)
    # 40 MiB each on a 64 MiB device: every handoff moves memory out. Each program checks its
    # bytes after every launch, so a turn that ran before its memory was back fails a check.
    results = run_together(gpu, ["alloc", "a", "40M", "write", "a", 17,
                                 *["launch", 100_000, "check", "a", 17] * 25])
    events = gpu.events()
    for result in results:
        assert set(checks(result)) == {"1"}, result.describe()
    staged = [fakelog.discarded(events, r.pid) for r in results]
    assert sum(map(len, staged)) >= 2, scheduler.log()
    # Pinned once per program: later moves reuse the staging memory.
    assert all(len(fakelog.named(events, "host_register", pid=r.pid)) <= 1 for r in results)
    assert "revoke" not in scheduler.log()


def staged_then(gpu, scheduler, leave) -> None:
    """A holder whose memory all went to staging memory at a drop; `leave` then lets it run
    without the lock; it must find every byte."""
    program = start_holding(gpu, scheduler, WRITTEN, then=CHECKED)
    scheduler.drop(program.pid, p.EVICT_ALL)
    scheduler.wait_for(program.pid, p.LockReleased)
    gpu.path("again").touch()
    leave(program)
    result = program.wait()
    assert result.returncode == 0, result.describe()
    assert fakelog.discarded(gpu.events(), result.pid)
    assert checks(result) == ["1", "1"]


def test_staged_memory_is_back_before_the_program_runs_in_mode_off(scripted):
    gpu, scheduler = scripted
    staged_then(gpu, scheduler, lambda program: scheduler.send(program.pid,
                                                               p.SchedMode(p.Mode.OFF, 30)))


def test_staged_memory_is_back_before_the_program_runs_without_a_scheduler(scripted):
    gpu, scheduler = scripted
    staged_then(gpu, scheduler, lambda program: scheduler.close())


def test_without_pinned_memory_the_driver_migrates_instead(scripted):
    gpu, scheduler = scripted
    # Pinning the 7 MiB of staging memory is refused; migrating is not.
    result, events = dropped(gpu, scheduler, WRITTEN, evict_bytes=p.EVICT_ALL, then=CHECKED,
                             env={"FAKECUDA_HOST_PIN_LIMIT": "4M"})
    ptr = result.pointers()
    assert not fakelog.discarded(events, result.pid)
    assert fakelog.prefetched(events, result.pid, to_host=True) == \
        [(ptr["a"], 3 * MiB), (ptr["m"], 2 * MiB), (ptr["b"], 4 * MiB)]
    done = scheduler.wait_moved_done(result.pid)
    assert (done.flags, done.bytes) == (TO_HOST_DONE, 9 * MiB)
    assert any("cannot pin" in line for line in result.gemshare_lines()), result.stderr
    assert checks(result) == ["1", "1"]


def test_a_hinted_move_has_its_staging_memory_pinned_before_the_drop(scripted):
    gpu, scheduler = scripted
    program = start_holding(gpu, scheduler, WRITTEN, then=CHECKED)
    scheduler.send(program.pid, p.IdleHint(0, 0, 7 * MiB))  # a drop would ask for a and b
    wait_for(lambda: fakelog.named(gpu.events(), "host_register", pid=program.pid),
             "staging memory pinned ahead")
    scheduler.drop(program.pid, p.EVICT_ALL)
    scheduler.wait_for(program.pid, p.LockReleased)
    result = scheduler.last_turn(program, gpu.path("again"))
    events = gpu.events()
    ptr = result.pointers()
    # Pinned once, ahead; the move found it and only copied.
    (pinned,) = fakelog.named(events, "host_register", pid=result.pid)
    assert int(pinned["size"]) >= 7 * MiB
    first_copy = min(e.ns for e in fakelog.moves_out(events, result.pid))
    assert pinned.ns < first_copy
    assert fakelog.discarded(events, result.pid) == [(ptr["a"], 3 * MiB), (ptr["b"], 4 * MiB)]
    assert checks(result) == ["1", "1"]


def test_pinning_new_staging_memory_is_not_counted_as_the_moves_time(scripted):
    gpu, scheduler = scripted
    # 9 MiB at 1 GB/s (about 10 ms), into staging memory that takes 16 MB/s to pin (about half
    # a second): the scheduler learns the link's rate from the report, and the pinning is paid
    # once by each program.
    started = start_holding(gpu, scheduler, WRITTEN, then=CHECKED,
                            env={"FAKECUDA_MIGRATE_GBPS": "1", "FAKECUDA_PIN_GBPS": "0.016"})
    scheduler.drop(started.pid, p.EVICT_ALL)
    scheduler.wait_for(started.pid, p.LockReleased)
    result = scheduler.last_turn(started, gpu.path("again"))
    events = gpu.events()
    pinned = sum(int(e["size"]) for e in fakelog.named(events, "host_register", pid=result.pid))
    pinning_us = pinned / 16e6 * 1e6
    assert pinning_us >= 450_000  # at least the 7 MiB that went by copy
    done = scheduler.wait_moved_done(result.pid)
    assert done.bytes == 9 * MiB
    # A quarter of the pinning: room for a busy machine, far from the move with it counted.
    assert done.elapsed_us < pinning_us / 4, done
    assert checks(result) == ["1", "1"]


def test_a_program_whose_memory_may_have_to_move_pins_its_staging_memory_ahead(gpu_with_nvml):
    """Two programs of 40 MiB on a 64 MiB device: once both have allocated, the first to hold
    the lock is told (IDLE_HINT) that all it has there may have to move, and pins its staging
    memory in the background while it runs; the eviction that comes after it let go then only
    copies. Pinning here takes 0.8 s (50 MB/s), the copy a few milliseconds. The second has not
    asked for the GPU yet: its memory counts because NVML lists its process there."""
    gpu, scheduler = gpu_with_nvml(device_mem="64M", tq=10)
    env = {"FAKECUDA_PIN_GBPS": "0.05"}
    first_alloc, second_alloc = gpu.path("first-alloc"), gpu.path("second-alloc")
    first = gpu.start(["init", "alloc", "a", "40M", "write", "a", 17, "touch-file", first_alloc,
                       "wait-file", second_alloc, "sleep-ms", 300, "launch", 1000,
                       "stream-sync", "sleep-ms", 2500, "check", "a", 17], env=env)
    second = gpu.start(["init", "alloc", "b", "40M", "touch-file", second_alloc,
                        "wait-file", first_alloc, "sleep-ms", 1800, "launch", 1000,
                        "stream-sync"], env=env)
    events = evicted_without_pinning(gpu, scheduler, first, second)
    (pinned,) = fakelog.named(events, "host_register", pid=first.pid)
    assert pinned.ns < min(e.ns for e in fakelog.moves_out(events, first.pid))
    assert checks(first.result()) == ["1"]


def evicted_without_pinning(gpu, scheduler, first, second) -> list:
    """Once both programs ended well: the first's eviction took no longer than its copy (0.4 s
    of slack, where pinning takes 0.8 s); the fake's events."""
    for program in (first, second):
        result = program.wait()
        assert result.returncode == 0, result.describe()
    log = scheduler.log()
    evicted = re.search(rf"(\d\d:\d\d:\d\d\.\d+) INFO evict client \d+ \(pid {first.pid},", log)
    moved = re.search(rf"(\d\d:\d\d:\d\d\.\d+) INFO moved client \d+ \(pid {first.pid},"
                      r"[^\n]*to the host in ([\d.]+) s", log)
    assert evicted and moved, log
    waited = seconds_of(moved.group(1)) - seconds_of(evicted.group(1)) - float(moved.group(2))
    assert waited < 0.4, log  # the 0.8 s of pinning was paid before the eviction came
    return gpu.events()


def seconds_of(clock: str) -> float:
    hours, minutes, seconds = clock.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def test_an_idle_program_pins_its_staging_memory_once_another_allocates_past_the_room(
        gpu_with_nvml):
    """The first program ran alone and went idle; the second then allocates so much that the
    first's memory may have to leave. The first, which holds nothing, is told so (IDLE_HINT),
    pins its staging memory in the background, and the eviction that comes when the second
    runs only copies. Pinning here takes 0.8 s (50 MB/s), the copy a few milliseconds. A
    context reserve of 1 MiB lets the first run alone with nothing to prepare. The second's
    memory counts before it asks because NVML lists its process on the GPU (a client NVML does
    not list makes nobody pin: test_gpu_processes.py)."""
    gpu, scheduler = gpu_with_nvml(device_mem="64M", tq=10, context_reserve_mib=1)
    env = {"FAKECUDA_PIN_GBPS": "0.05"}
    ran = gpu.path("ran")
    first = gpu.start(["init", "alloc", "a", "40M", "write", "a", 17, "launch", 1000,
                       "stream-sync", "touch-file", ran, "sleep-ms", 4000, "check", "a", 17],
                      env=env)
    second = gpu.start(["init", "wait-file", ran, "sleep-ms", 600, "alloc", "b", "40M",
                        "sleep-ms", 1500, "launch", 1000, "stream-sync"], env=env)
    events = evicted_without_pinning(gpu, scheduler, first, second)
    pinned = fakelog.named(events, "host_register", pid=first.pid)
    assert pinned and pinned[0].ns < min(e.ns for e in fakelog.moves_out(events, first.pid))
    assert checks(first.result()) == ["1"]


def test_a_move_out_migrates_what_staging_memory_would_take_longer_to_pin(scripted):
    """Pinning here runs at 200 MB/s, as the first move out measures (64 MiB in about 0.3 s).
    The program then allocates 512 MiB more: pinning staging memory for it would take 2.7 s,
    where the driver migrates it at about 3 GB/s (0.2 s). That move copies the 64 MiB that
    has staging memory and lets the driver migrate the rest, which comes back intact. Its
    staging memory is then pinned ahead, a short piece at a time."""
    gpu, scheduler = scripted
    more, grown = gpu.path("more"), gpu.path("grown")
    program = start_holding(gpu, scheduler, ["alloc", "a", "64M", "write", "a", 17],
                            env={"FAKECUDA_DEVICE_MEM": "1G", "FAKECUDA_PIN_GBPS": "0.2",
                                 "GEMSHARE_DEBUG": "1"},
                            then=["alloc", "b", "512M", "write", "b", 34, "launch", 100, "sync",
                                  "touch-file", grown, "wait-file", more, "check", "a", 17,
                                  "check", "b", 34, "sleep-ms", 3500])
    scheduler.drop(program.pid, p.EVICT_ALL)
    scheduler.wait_for(program.pid, p.LockReleased)
    gpu.path("again").touch()
    scheduler.turn(program, grown)
    scheduler.drop(program.pid, p.EVICT_ALL)
    scheduler.wait_for(program.pid, p.LockReleased, count=2)
    result = scheduler.last_turn(program, more)
    events = gpu.events()
    ptr = result.pointers()
    # b went by the driver's migration, in two 256 MiB chunks; a by copy, both times.
    b_out = [e for e in fakelog.moves_out(events, result.pid)
             if int(e["ptr"], 16) in (ptr["b"], ptr["b"] + 256 * MiB)]
    assert [(e.name.split("_pt")[0], int(e["size"])) for e in b_out] == \
        [("prefetch", 256 * MiB)] * 2
    assert fakelog.discarded(events, result.pid) == [(ptr["a"], 64 * MiB)] * 2
    # Only a's staging memory was pinned before that move; b's was pinned ahead after it, in
    # pieces of 0.1 s at the rate measured, or one move's chunk (256 MiB) at least.
    pins = fakelog.named(events, "host_register", pid=result.pid)
    assert [int(pin["size"]) for pin in pins] == [64 * MiB, 256 * MiB, 256 * MiB]
    assert pins[1].ns > b_out[-1].ns
    assert any("the driver migrates the rest" in line for line in result.gemshare_lines()), \
        result.stderr
    assert checks(result) == ["1", "1"]


def test_a_first_move_out_learns_the_pinning_rate_from_its_first_piece(scripted):
    """Nothing is known of this host yet, and pinning runs at 200 MB/s: the first move out of
    768 MiB pins one 256 MiB piece (1.3 s), learns the rate from it, and lets the driver
    migrate the other 512 MiB rather than pin them (2.7 s more)."""
    gpu, scheduler = scripted
    result, events = dropped(gpu, scheduler, ["alloc", "a", "768M", "write", "a", 17],
                             evict_bytes=p.EVICT_ALL, then=["check", "a", 17],
                             env={"FAKECUDA_DEVICE_MEM": "1G", "FAKECUDA_PIN_GBPS": "0.2"})
    a = result.pointers()["a"]
    moves = [(e.name.split("_pt")[0], int(e["ptr"], 16) - a, int(e["size"]))
             for e in fakelog.moves_out(events, result.pid)]
    assert moves == [("discard", 0, 256 * MiB), ("prefetch", 256 * MiB, 256 * MiB),
                     ("prefetch", 512 * MiB, 256 * MiB)]
    first_pin = fakelog.named(events, "host_register", pid=result.pid)[0]
    assert int(first_pin["size"]) == 256 * MiB
    assert checks(result) == ["1"]
