"""New converted memory is prefetched to its device (GEMSHARE_POPULATE, on by default): at once
when the process may run there, else on its next grant, before its work; never past what the
device has free, never with GEMSHARE_POPULATE=0. Frames come from `scripted`
(scripted_scheduler.py); the fake device has 64 MiB."""

from __future__ import annotations

from gemshare_nvs import protocol as p

import libnvs_fakelog as fakelog

MiB = 1 << 20


def run_granted_first(scripted, allocation: str, env: dict | None = None):
    """A process that launches (so asks for the lock and is granted), then allocates `allocation`
    bytes as "a" and launches again; its events and pointers."""
    gpu, scheduler = scripted
    program = gpu.start(["init", "launch", 100, "sync", "alloc", "a", allocation,
                         "launch", 100, "sync"], env=env)
    scheduler.wait_for(program.pid, p.RequestLock)
    scheduler.grant(program.pid)
    result = program.wait()
    assert result.returncode == 0, result.describe()
    return gpu.events(), result.pointers()["a"], result.pid


def to_device(events, pid: int) -> list[tuple[int, int]]:
    return fakelog.prefetched(events, pid, to_host=False)


def test_memory_allocated_while_holding_the_lock_is_prefetched_at_once(scripted):
    events, a, pid = run_granted_first(scripted, "4M")
    assert to_device(events, pid) == [(a, 4 * MiB)]
    (prefetch,) = fakelog.prefetches(events, pid, to_host=False)
    launches = fakelog.named(events, "launch", pid=pid)
    assert launches[0].ns < prefetch.ns < launches[1].ns


def test_memory_allocated_before_the_grant_is_prefetched_before_the_first_launch(scripted):
    gpu, scheduler = scripted
    program = gpu.start(["init", "alloc", "a", "4M", "launch", 100, "sync"])
    scheduler.wait_for(program.pid, p.RequestLock)
    assert to_device(gpu.events(), program.pid) == [], "prefetched without the lock"
    scheduler.grant(program.pid)
    result = program.wait()
    assert result.returncode == 0, result.describe()
    events = gpu.events()
    (prefetch,) = fakelog.prefetches(events, result.pid, to_host=False)
    assert int(prefetch["ptr"], 16) == result.pointers()["a"]
    (launch,) = fakelog.named(events, "launch", pid=result.pid)
    assert prefetch.ns < launch.ns


def test_an_allocation_larger_than_what_is_left_free_is_left_to_page_faults(scripted):
    events, _, pid = run_granted_first(scripted, "40M")  # 24 MiB free after it, of 64
    assert to_device(events, pid) == []


def test_populate_off_prefetches_nothing(scripted):
    events, _, pid = run_granted_first(scripted, "4M", env={"GEMSHARE_POPULATE": "0"})
    assert to_device(events, pid) == []
