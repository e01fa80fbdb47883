"""Many threads launching at once through libnvs.so while the GPU lock changes hands, with the
library built under ThreadSanitizer (`make lib SANITIZE=thread`): no data race, no lost or
misdirected launch, and still one process on the GPU at a time. Each process has memory to move
and works in batches that outlast one quantum, so it moves memory out when dropped and back when
granted again (the other ran meanwhile), beside its launching threads."""

from __future__ import annotations

import pytest

import libnvs_fakelog as fakelog
from libnvs_programs import wait_file

# 1.8 s of work per process in 1 s quanta. A batch starts after the previous one finished, so a
# process's last one always needs a grant after the other's turn.
THREADS, LAUNCHES, KERNEL_US, BATCHES = 8, 15, 5000, 3


def run_storm(gpu, preload, per_thread: bool):
    env = {"TSAN_OPTIONS": "halt_on_error=1 exitcode=66 second_deadlock_stack=1"}
    programs = [gpu.start(["init", "alloc", "buf", "4M", "touch-file", gpu.path(f"ready-{i}"),
                           "wait-file", gpu.path("go"),
                           *["threads", THREADS, LAUNCHES, KERNEL_US] * BATCHES, "sync"],
                          preload=preload, env=env, ptsz=per_thread) for i in range(2)]
    for i in range(2):
        wait_file(gpu.path(f"ready-{i}"))
    gpu.path("go").touch()
    return [p.wait(timeout=120) for p in programs]


@pytest.mark.parametrize("per_thread", [False, True], ids=["legacy", "per-thread"])
def test_many_threads_launch_at_once_without_races(gpu_with, tsan_preload, per_thread):
    gpu, scheduler = gpu_with(tq=1)
    results = run_storm(gpu, tsan_preload, per_thread)
    for result in results:
        assert "ThreadSanitizer" not in result.stderr, result.stderr
        assert result.returncode == 0, result.describe()
        assert [s["failed"] for s in result.steps("threads")] == ["0"] * BATCHES
    events = gpu.events()
    a, b = (fakelog.exec_intervals(events, r.pid, {"kernel"}) for r in results)
    assert len(a) == len(b) == THREADS * LAUNCHES * BATCHES, "launches were lost or duplicated"
    assert not fakelog.overlapping(a, b), "both processes ran at once in mode on"
    assert any(fakelog.prefetches(events, r.pid, to_host=False) for r in results), \
        "no grant brought memory back: the swap path did not run beside the threads"
    suffix = "_ptsz" if per_thread else ""
    for result in results:
        launches = fakelog.named(events, "launch" + suffix, pid=result.pid)
        assert len(launches) == THREADS * LAUNCHES * BATCHES
        assert {e["stream_kind"] for e in launches} == {"per_thread" if per_thread else "legacy"}
        if per_thread:  # each thread its own default stream
            assert len({e["stream"] for e in launches}) == THREADS * BATCHES
