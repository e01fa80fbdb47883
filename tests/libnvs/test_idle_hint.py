"""IDLE_HINT: while it holds the lock, a process's early-release idle time is its
GEMSHARE_IDLE_RELEASE_MS bounded by the hint: at least the hint from 250 ms up, at most a shorter
hint; its own 0 still means never; each grant starts without a hint. Frames come from `scripted`
(scripted_scheduler.py)."""

from __future__ import annotations

import time

from gemshare_nvs import protocol as p

import libnvs_fakelog as fakelog

SECOND = 1_000_000_000


def test_a_hint_lengthens_the_early_release_until_the_next_grant(scripted):
    gpu, scheduler = scripted
    program = gpu.start(["init", "launch", 100, "sync", "wait-file", gpu.path("again"),
                         "launch", 100, "sync", "wait-file", gpu.path("end")],
                        env={"GEMSHARE_IDLE_RELEASE_MS": "100"})
    scheduler.wait_for(program.pid, p.RequestLock)
    scheduler.grant(program.pid)
    scheduler.send(program.pid, p.IdleHint(0, 1000))
    ((hinted_ns, hinted),) = scheduler.wait_for(program.pid, p.LockReleased)
    gpu.path("again").touch()
    scheduler.wait_for(program.pid, p.RequestLock, count=2)
    scheduler.grant(program.pid)
    (_, (plain_ns, plain)) = scheduler.wait_for(program.pid, p.LockReleased, count=2)
    gpu.path("end").touch()
    result = program.wait()
    assert result.returncode == 0, result.describe()

    assert hinted.reason == plain.reason == p.ReleaseReason.IDLE
    first, second = fakelog.named(gpu.events(), "launch", pid=program.pid)
    assert hinted_ns - first.ns >= 1 * SECOND, "released before the hinted idle time"
    assert plain_ns - second.ns < 0.9 * SECOND, "the hint outlived its grant"


def hinted_holder(scripted, own_ms: str, hint_ms: int):
    """A process that launches once and then idles, granted the lock and sent a hint."""
    gpu, scheduler = scripted
    program = gpu.start(["init", "launch", 100, "sync", "wait-file", gpu.path("end")],
                        env={"GEMSHARE_IDLE_RELEASE_MS": own_ms})
    scheduler.wait_for(program.pid, p.RequestLock)
    scheduler.grant(program.pid)
    scheduler.send(program.pid, p.IdleHint(0, hint_ms))
    return gpu, scheduler, program


def released_after_launch(scripted, own_ms: str, hint_ms: int) -> tuple[p.LockReleased, int]:
    """hinted_holder's release, once the process has ended, and how long after its launch it
    came, in ns."""
    gpu, scheduler, program = hinted_holder(scripted, own_ms, hint_ms)
    ((released_ns, released),) = scheduler.wait_for(program.pid, p.LockReleased)
    gpu.path("end").touch()
    assert program.wait().returncode == 0
    (launch,) = fakelog.named(gpu.events(), "launch", pid=program.pid)
    return released, released_ns - launch.ns


def test_a_shorter_hint_shortens_the_early_release(scripted):
    released, after_ns = released_after_launch(scripted, "5000", 100)
    assert released.reason == p.ReleaseReason.IDLE
    assert after_ns < 4 * SECOND, "the process kept its own, longer idle time"


def test_a_short_hint_never_lengthens_a_shorter_setting(scripted):
    _, after_ns = released_after_launch(scripted, "10", 240)
    assert after_ns < 0.2 * SECOND, "the hint made the process keep the lock"


def test_a_cheap_handoff_hint_counts_idle_time_once(scripted):
    """A hint below the floor (someone waits, nothing to move) is no reason to wait for a second
    idle period after the GPU is found done: the release comes one hint after the last work."""
    released, after_ns = released_after_launch(scripted, "5000", 240)
    assert released.reason == p.ReleaseReason.IDLE
    assert 0.24 * SECOND <= after_ns < 0.42 * SECOND


def test_a_hint_never_turns_early_release_on(scripted):
    gpu, scheduler, program = hinted_holder(scripted, "0", 200)
    time.sleep(0.8)
    assert not scheduler.received(program.pid, p.LockReleased)
    scheduler.drop(program.pid)
    ((_, released),) = scheduler.wait_for(program.pid, p.LockReleased)
    assert released.reason == p.ReleaseReason.DROPPED
    gpu.path("end").touch()
    assert program.wait().returncode == 0


def test_with_a_hint_idle_time_counts_from_when_the_queued_work_was_done(scripted):
    gpu, scheduler = scripted
    # Each pass queues 400 ms of GPU work and sleeps 700 ms without waiting for it: the GPU has
    # nothing to do for 300 ms of each pass, less than the hinted 600 ms, although 700 ms pass
    # between submissions.
    passes = ["launch", 400_000, "sleep-ms", 700] * 4
    program = gpu.start(["init", "launch", 100, "sync", "touch-file", gpu.path("ran"), *passes,
                         "sync"])
    scheduler.turn(program, gpu.path("ran"))
    scheduler.send(program.pid, p.IdleHint(0, 600))
    result = program.wait()
    assert result.returncode == 0, result.describe()
    assert not scheduler.received(program.pid, p.LockReleased), \
        "released in a gap shorter than the hint"


def test_a_floor_hint_is_waited_once_and_the_release_says_how_long_it_was_idle(scripted):
    """A hint from the floor up counts from a moment the GPU is known done, found early in the
    gap: the release comes about one hint after the work, not two, and LOCK_RELEASED's idle_us
    dates the gap from the work (protocol 8), whatever the hint."""
    released, after_ns = released_after_launch(scripted, "100", 1000)
    assert released.reason == p.ReleaseReason.IDLE
    assert 1.0 * SECOND <= after_ns < 1.6 * SECOND, "not one hint after the last work"
    assert 1.0 * SECOND <= released.idle_us * 1000 <= after_ns + 0.06 * SECOND
