"""Mode `auto` on the fake driver: the scheduler learns each process's allocated bytes and the
device's size from libnvs's MEM_REPORTs (no NVML here), lets processes whose memory fits on the
64 MiB device together hold the GPU at once, and makes the others take turns, prefetching each
one's memory back when its turn comes again."""

from __future__ import annotations

import re

import libnvs_fakelog as fakelog
from libnvs_programs import run_pair_in_auto

DEVICE_BYTES = 64 << 20


def test_two_programs_whose_memory_fits_run_together(gpu_with):
    gpu, scheduler, (a, b) = run_pair_in_auto(gpu_with, "16M")
    events = gpu.events()
    runs_a = fakelog.exec_intervals(events, a.pid, {"kernel"})
    runs_b = fakelog.exec_intervals(events, b.pid, {"kernel"})
    assert len(runs_a) == len(runs_b) == 15
    assert fakelog.overlapping(runs_a, runs_b), "processes that fit together never ran at once"
    assert re.search(r"\bgrant client \d+ \(pid \d+,[^\n]*, shared", scheduler.log()), \
        scheduler.log()


def test_two_programs_whose_memory_does_not_fit_take_turns(gpu_with):
    gpu, scheduler, (a, b) = run_pair_in_auto(gpu_with, "40M")  # 80 MiB on a 64 MiB device
    events = gpu.events()
    runs_a = fakelog.exec_intervals(events, a.pid, {"kernel"})
    runs_b = fakelog.exec_intervals(events, b.pid, {"kernel"})
    assert not fakelog.overlapping(runs_a, runs_b), "processes that do not fit ran at once"
    assert fakelog.switches(events, {a.pid, b.pid}) >= 2, "no turns: one process ran to the end"
    # Whoever waited got its memory prefetched back as its turn began.
    assert any(fakelog.prefetches(events, r.pid, to_host=False) for r in (a, b))
    # The scheduler knew they do not fit together, so each drop asked for eviction: the outgoing
    # holder moved its memory to the host before the other one's next kernel ran.
    assert re.search(r"\bdrop client \d+ [^\n]*, evict [^\n]* to the host", scheduler.log()), \
        scheduler.log()
    for outgoing, incoming in ((a, b), (b, a)):
        evicted = fakelog.moves_out(events, outgoing.pid)
        assert evicted, f"pid {outgoing.pid} was dropped but never moved its memory out"
        first_eviction = min(e.ns for e in evicted)
        assert any(start > first_eviction
                   for start, _ in fakelog.exec_intervals(events, incoming.pid, {"kernel"}))
