"""Unified Memory conversion and accounting by libnvs.so, on a small simulated device (64 MiB).

What each allocation API becomes (see libnvs's documentation): cuMemAlloc, cuMemAllocPitch and
cuMemAllocAsync turn into managed memory; pool allocations (cuMemAllocFromPoolAsync) and the
virtual memory API (cuMemCreate) stay as they are but are counted; the program's own managed
memory is counted, never limited."""

from __future__ import annotations

import time

import pytest
from gemshare_nvs import protocol as p

import libnvs_fakelog as fakelog
from libnvs_programs import client_of, grants, scheduler_status, wait_file, wait_for

MIB = 1 << 20
DEVICE = 64 * MIB
OUT_OF_MEMORY = "2"
TEXTURE_PITCH_ALIGNMENT = 32  # what the fake device reports, as an H100 does


def allocations_of(gpu, pid):
    return [e for e in gpu.events() if e.pid == pid and e.name.startswith("alloc_")]


def reported(scheduler, pid):
    """What the scheduler last heard this process holds (MEM_REPORT), or None."""
    return (client_of(scheduler_status(scheduler.socket), pid) or {}).get("allocated_bytes")


def test_device_allocations_become_managed_memory_holding_real_bytes(gpu):
    result = gpu.run(["init", "alloc", "a", "1M", "attr", "a", "write", "a", "0x33", "check", "a",
                      "0x33", "fill", "a", "0x44", "check", "a", "0x44", "free", "a"])
    assert result.returncode == 0, result.describe()
    attr = result.ok("attr")
    assert attr["is_managed"] == "1" and attr["ipc_capable"] == "0"
    assert [c["ok"] for c in result.steps("check")] == ["1", "1"]
    (alloc,) = allocations_of(gpu, result.pid)
    assert (alloc.name, alloc["api"], alloc["size"]) == ("alloc_managed", "cuMemAllocManaged",
                                                         str(MIB))
    (free,) = fakelog.named(gpu.events(), "free", pid=result.pid)
    assert (free["ptr"], free["kind"]) == (alloc["ptr"], "managed")


def test_pitched_allocations_become_managed_with_a_usable_pitch(gpu):
    result = gpu.run(["init", "alloc-pitch", "p", "1000", "33", "attr", "p", "write", "p", "7",
                      "check", "p", "7", "free", "p"])
    assert result.returncode == 0, result.describe()
    pitched = result.ok("alloc-pitch")
    pitch = int(pitched["pitch"])
    assert pitch >= 1000 and pitch % TEXTURE_PITCH_ALIGNMENT == 0
    attr = result.ok("attr")
    assert attr["is_managed"] == "1"
    assert int(attr["range_size"]) >= pitch * 33
    assert result.ok("check")["ok"] == "1"


def test_frees_give_the_memory_back_to_the_accounting(gpu_with):
    gpu, scheduler = gpu_with()
    program = gpu.start(["init", "alloc", "a", "20M", "alloc-async", "b", "4M", "mem-info",
                         "touch-file", gpu.path("allocated"), "wait-file", gpu.path("go"),
                         "free", "a", "free", "b", "sync", "mem-info", "touch-file",
                         gpu.path("freed"), "wait-file", gpu.path("end")])
    wait_file(gpu.path("allocated"))
    reported = wait_for(lambda: (client_of(scheduler_status(scheduler.socket), program.pid)
                                 or {}).get("allocated_bytes") == 24 * MIB,
                        "the scheduler to see 24 MiB allocated")
    assert reported
    gpu.path("go").touch()
    wait_file(gpu.path("freed"))
    wait_for(lambda: (client_of(scheduler_status(scheduler.socket), program.pid)
                      or {}).get("allocated_bytes") == 0,
             "the scheduler to see the memory freed")
    gpu.path("end").touch()
    result = program.wait()
    assert result.returncode == 0, result.describe()
    held, after = (int(m["free"]) for m in result.steps("mem-info"))
    assert held == DEVICE - 24 * MIB and after == DEVICE


def test_mem_get_info_counts_this_process_only_so_caches_size_sanely(gpu):
    """Each process owns the whole device while it holds the lock: another one's memory does not
    shrink what cuMemGetInfo offers it, while the driver's own answer would (shared device)."""
    other = gpu.start(["init", "alloc", "a", "30M", "touch-file", gpu.path("held"), "wait-file",
                       gpu.path("done")])
    wait_file(gpu.path("held"))
    result = gpu.run(["init", "mem-info", "alloc", "b", "10M", "mem-info"])
    unmodified = gpu.run(["init", "mem-info"], preload=False)
    gpu.path("done").touch()
    assert other.wait().returncode == 0
    first, second = result.steps("mem-info")
    assert (int(first["free"]), int(first["total"])) == (DEVICE, DEVICE)
    assert int(second["free"]) == DEVICE - 10 * MIB
    assert int(unmodified.ok("mem-info")["free"]) < DEVICE - 30 * MIB


def test_stream_ordered_allocations_become_managed_and_are_freed_in_order(gpu):
    result = gpu.run(["init", "alloc-async", "x", "8M", "attr", "x", "write", "x", "5", "check",
                      "x", "5", "free", "x", "sync", "mem-info"])
    assert result.returncode == 0, result.describe()
    assert result.ok("attr")["is_managed"] == "1"
    assert result.ok("mem-info")["free"] == str(DEVICE)
    (alloc,) = allocations_of(gpu, result.pid)
    assert alloc.name == "alloc_managed" and alloc["size"] == str(8 * MIB)


def test_pool_allocations_stay_pool_memory_and_are_counted(gpu):
    result = gpu.run(["init", "alloc-pool", "y", "8M", "attr", "y", "mem-info", "free", "y",
                      "sync", "mem-info"])
    assert result.returncode == 0, result.describe()
    assert result.ok("attr")["is_managed"] == "0"
    held, after = (int(m["free"]) for m in result.steps("mem-info"))
    assert (held, after) == (DEVICE - 8 * MIB, DEVICE)
    (alloc,) = allocations_of(gpu, result.pid)
    assert alloc.name == "alloc_async" and alloc["api"] == "cuMemAllocFromPoolAsync"


def test_virtual_memory_stays_as_it_is_and_is_counted(gpu):
    result = gpu.run(["init", "vmm-alloc", "v", "4M", "write", "v", "9", "check", "v", "9",
                      "mem-info", "free", "v", "mem-info"])
    assert result.returncode == 0, result.describe()
    held, after = (int(m["free"]) for m in result.steps("mem-info"))
    assert (held, after) == (DEVICE - 4 * MIB, DEVICE)
    assert fakelog.named(gpu.events(), "vmm_create", pid=result.pid)
    assert not allocations_of(gpu, result.pid)


def test_virtual_memory_counts_until_released_and_unmapped(gpu_with):
    """CUDA samples and NCCL release a handle right after mapping it: the driver keeps the
    physical memory until the last mapping goes, and so does the count."""
    gpu, scheduler = gpu_with()
    unmodified = gpu.run(["init", "vmm-alloc", "v", "4M", "vmm-release", "v", "mem-info", "free",
                          "v", "mem-info"], preload=False)
    assert unmodified.returncode == 0, unmodified.describe()
    assert [int(m["free"]) for m in unmodified.steps("mem-info")] == [DEVICE - 4 * MIB, DEVICE]

    program = gpu.start(["init", "vmm-alloc", "v", "4M", "vmm-release", "v", "mem-info",
                         "touch-file", gpu.path("released"), "wait-file", gpu.path("go"), "free",
                         "v", "mem-info", "touch-file", gpu.path("unmapped"), "wait-file",
                         gpu.path("end")])
    wait_file(gpu.path("released"))
    wait_for(lambda: reported(scheduler, program.pid) == 4 * MIB, "a report of 4 MiB")
    time.sleep(0.3)  # a later report (at most every 100 ms) would say otherwise
    assert reported(scheduler, program.pid) == 4 * MIB
    gpu.path("go").touch()
    wait_file(gpu.path("unmapped"))
    wait_for(lambda: reported(scheduler, program.pid) == 0, "a report of nothing held")
    gpu.path("end").touch()
    result = program.wait()
    assert result.returncode == 0, result.describe()
    assert [int(m["free"]) for m in result.steps("mem-info")] == [DEVICE - 4 * MIB, DEVICE]
    (freed,) = fakelog.named(gpu.events(), "vmm_free", pid=program.pid)
    assert freed["size"] == str(4 * MIB)


def test_the_last_primary_context_release_frees_its_memory(gpu_with):
    """The driver resets the primary context at its last release, freeing its allocations:
    they stop counting, and do not crowd out what the program allocates next."""
    gpu, scheduler = gpu_with()
    steps = ["init", "alloc", "a", "40M", "primary-release", "init", "mem-info", "alloc", "b",
             "40M", "mem-info"]
    unmodified = gpu.run([*steps, "free", "b"], preload=False)
    assert unmodified.returncode == 0, unmodified.describe()
    assert [a["result"] for a in unmodified.steps("alloc")] == ["0", "0"]

    program = gpu.start([*steps, "touch-file", gpu.path("done"), "wait-file", gpu.path("end")])
    wait_file(gpu.path("done"))
    wait_for(lambda: reported(scheduler, program.pid) == 40 * MIB, "a report of 40 MiB")
    gpu.path("end").touch()
    result = program.wait()
    assert result.returncode == 0, result.describe()
    assert [a["result"] for a in result.steps("alloc")] == ["0", "0"]
    assert [int(m["free"]) for m in result.steps("mem-info")] == [DEVICE, DEVICE - 40 * MIB]
    freed = [e for e in fakelog.named(gpu.events(), "free", pid=program.pid)
             if e["api"] == "cuDevicePrimaryCtxRelease"]
    assert [e["ptr"] for e in freed] == [result.steps("alloc")[0]["ptr"]]


def test_the_program_s_own_managed_memory_does_not_crowd_out_device_allocations(gpu):
    """Its own managed memory is counted (reported, cuMemGetInfo) but only converted and device
    memory meet the single-process limit: what works without libnvs works with it."""
    steps = ["init", "alloc-managed", "m", "100M", "alloc", "a", "1M", "mem-info", "alloc", "b",
             "64M"]
    unmodified = gpu.run([*steps, "free", "a", "free", "m"], preload=False)
    result = gpu.run(steps)
    for run in (unmodified, result):
        a, b = run.steps("alloc")
        assert (a["result"], b["result"]) == ("0", OUT_OF_MEMORY), run.describe()
    assert result.ok("mem-info")["free"] == "0"  # 101 MiB held on a 64 MiB device


def end_once_nothing_is_reported(gpu, scheduler, program):
    """Wait for a report of nothing held, then let the program end; its result."""
    wait_for(lambda: reported(scheduler, program.pid) == 0, "a report of nothing held",
             timeout=5)
    gpu.path("end").touch()
    result = program.wait()
    assert result.returncode == 0, result.describe()
    return result


def test_memory_freed_in_stream_order_stops_counting_without_another_call(gpu_with):
    """The client thread frees converted memory once its stream reached cuMemFreeAsync, and
    reports it: no later call of the program's is needed."""
    gpu, scheduler = gpu_with()
    program = gpu.start(["init", "alloc-async", "x", "8M", "touch-file", gpu.path("allocated"),
                         "wait-file", gpu.path("go"), "free", "x", "sync", "touch-file",
                         gpu.path("freed"), "wait-file", gpu.path("end")])
    wait_file(gpu.path("allocated"))
    wait_for(lambda: reported(scheduler, program.pid) == 8 * MIB, "a report of 8 MiB")
    gpu.path("go").touch()
    wait_file(gpu.path("freed"))
    result = end_once_nothing_is_reported(gpu, scheduler, program)
    (freed,) = fakelog.named(gpu.events(), "free", pid=program.pid)
    assert (freed["ptr"], freed["kind"]) == (result.ok("alloc-async")["ptr"], "managed")


def test_memory_freed_in_stream_order_is_not_freed_inside_a_capture(gpu_with):
    """Freeing managed memory may synchronize: the client thread waits until the capture ends."""
    gpu, scheduler = gpu_with()
    hold = gpu.path("hold")
    program = gpu.start(["init", "alloc-async", "x", "8M", "block-until", hold, "free", "x",
                         "stream-new", "capture-begin", "global", "touch-file", hold,
                         "sleep-ms", "400", "capture-end", "touch-file", gpu.path("captured"),
                         "wait-file", gpu.path("end")])
    wait_file(gpu.path("captured"))
    result = end_once_nothing_is_reported(gpu, scheduler, program)
    events = gpu.events()
    assert not fakelog.named(events, "capture_violation", "capture_invalidated", pid=program.pid)
    (capture_end,) = fakelog.named(events, "capture_end", pid=program.pid)
    (freed,) = fakelog.named(events, "free", pid=program.pid)
    assert freed.ns > capture_end.ns


def test_one_process_may_not_hold_more_than_the_device_by_default(gpu):
    result = gpu.run(["init", "alloc", "a", "40M", "alloc", "b", "40M", "alloc-pitch", "c", "64K",
                      "512"], env={"GEMSHARE_DEBUG": "1"})
    a, b = result.steps("alloc")
    assert a["result"] == "0" and b["result"] == OUT_OF_MEMORY
    assert result.one("alloc-pitch")["result"] == OUT_OF_MEMORY
    why = [line for line in result.gemshare_lines()
           if "GEMSHARE_ENABLE_SINGLE_OVERSUB=1 allows" in line]
    assert len(why) == 2, f"no debug line per refusal says why it failed:\n{result.stderr}"


def oversubscription_hints(result) -> list[str]:
    return [line for line in result.gemshare_lines()
            if "CUDA_ERROR_OUT_OF_MEMORY" in line and "GEMSHARE_ENABLE_SINGLE_OVERSUB=1" in line]


@pytest.mark.parametrize("refusals", [1, 2])
def test_a_program_refused_past_the_device_is_told_once_how_to_allow_it(gpu, refusals):
    """Without GEMSHARE_DEBUG: the program's own error names neither gemshare nor the setting."""
    steps = ["init", "alloc", "a", "40M"]
    for n in range(refusals):
        steps += ["alloc", f"b{n}", "40M"]
    result = gpu.run(steps)
    assert [a["result"] for a in result.steps("alloc")] == ["0"] + [OUT_OF_MEMORY] * refusals
    assert len(oversubscription_hints(result)) == 1, result.describe()
    assert len(result.gemshare_lines()) == 1, result.describe()


def test_a_program_within_the_device_is_not_told_of_oversubscription(gpu):
    result = gpu.run(["init", "alloc", "a", "40M", "free", "a", "alloc", "b", "40M"])
    assert [a["result"] for a in result.steps("alloc")] == ["0", "0"], result.describe()
    assert oversubscription_hints(result) == [], result.describe()


def test_single_process_oversubscription_when_enabled(gpu):
    result = gpu.run(["init", "alloc", "a", "40M", "alloc", "b", "40M", "alloc", "c", "40M",
                      "write", "c", "3", "check", "c", "3", "mem-info"],
                     env={"GEMSHARE_ENABLE_SINGLE_OVERSUB": "1"})
    assert result.returncode == 0, result.describe()
    assert [a["result"] for a in result.steps("alloc")] == ["0", "0", "0"]
    assert result.ok("mem-info")["free"] == "0"


def test_two_processes_share_a_device_neither_could_share_without_it(gpu):
    """The point of gemshare: 40 + 40 MiB of device allocations on a 64 MiB device."""
    def pair(preload):
        first = gpu.start(["init", "alloc", "a", "40M", "touch-file", gpu.path(f"a{preload}"),
                           "wait-file", gpu.path(f"b{preload}")], preload=preload)
        wait_file(gpu.path(f"a{preload}"))
        second = gpu.run(["init", "alloc", "b", "40M", "write", "b", "1", "check", "b", "1"],
                         preload=preload)
        gpu.path(f"b{preload}").touch()
        assert first.wait().returncode == 0
        return second.one("alloc")["result"]

    assert pair(preload=False) == OUT_OF_MEMORY
    assert pair(preload=True) == "0"


def test_the_program_s_own_managed_memory_may_exceed_the_device(gpu):
    result = gpu.run(["init", "alloc-managed", "m", "100M", "attr", "m"])
    assert result.returncode == 0, result.describe()
    assert result.ok("attr")["is_managed"] == "1"


def test_unified_memory_off_keeps_device_memory_and_the_lock(gpu_with):
    gpu, scheduler = gpu_with()
    result = gpu.run(["init", "alloc", "a", "1M", "attr", "a", "launch", "100", "sync",
                      "alloc", "b", "40M", "alloc", "c", "40M"],
                     env={"GEMSHARE_UNIFIED_MEMORY": "0"})
    attr = result.ok("attr")
    assert attr["is_managed"] == "0" and attr["ipc_capable"] == "1"
    a, b, c = result.steps("alloc")
    assert (a["result"], b["result"], c["result"]) == ("0", "0", OUT_OF_MEMORY)
    kinds = [e.name for e in allocations_of(gpu, result.pid)]
    assert kinds == ["alloc_device"] * 3
    assert grants(scheduler.log(), result.pid), "the launch did not go through the GPU lock"


# One of each kind of allocation libnvs counts, and how many bytes it takes.
REPORTED_KINDS = {
    "converted": (["alloc", "a", "3M"], {}, 3 * MIB),
    "device (unified memory off)": (["alloc", "a", "3M"], {"GEMSHARE_UNIFIED_MEMORY": "0"},
                                    3 * MIB),
    "program's managed": (["alloc-managed", "m", "3M"], {}, 3 * MIB),
    "pool": (["alloc-pool", "q", "3M"], {}, 3 * MIB),
    "virtual memory": (["vmm-alloc", "v", "4M"], {}, 4 * MIB),  # 2 MiB granularity
}


@pytest.mark.parametrize("kind", REPORTED_KINDS)
def test_memory_reports_carry_the_device_size_whatever_was_allocated(scripted, kind):
    """Without NVML, mode auto's capacity is the device size the clients report."""
    gpu, scheduler = scripted
    steps, env, size = REPORTED_KINDS[kind]
    program = gpu.start(["init", *steps, "wait-file", gpu.path("end")], env=env)

    def report_of_the_allocation():
        reports = [m for _, m in scheduler.received(program.pid, p.MemReport)]
        return next((m for m in reports if m.allocated_bytes == size), None)

    report = wait_for(report_of_the_allocation, f"a MEM_REPORT of {size} bytes")
    gpu.path("end").touch()
    assert program.wait().returncode == 0
    assert (report.device, report.device_total_bytes) == (0, DEVICE)


def test_a_lock_request_comes_after_the_report_of_the_memory_allocated_before_it(scripted):
    gpu, scheduler = scripted
    # The second allocation falls inside the 100 ms between reports: the launch's request must
    # not overtake its report, or the scheduler grants without making room for it.
    program = gpu.start(["init", "alloc", "a", "4M", "alloc", "b", "4M", "launch", 100, "sync"])
    ((requested_ns, _),) = scheduler.wait_for(program.pid, p.RequestLock)
    reports = [(ns, m.allocated_bytes) for ns, m in scheduler.received(program.pid, p.MemReport)
               if ns <= requested_ns]
    assert reports and reports[-1][1] == 8 * MIB, reports
    scheduler.grant(program.pid)
    assert program.wait().returncode == 0
