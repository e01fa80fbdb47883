"""The scheduler's memory limit (LIMITS) in libnvs.so, and the label in REGISTER.

Allocations that would take the process past the limit on a device fail with
CUDA_ERROR_OUT_OF_MEMORY before the driver is asked; cuMemGetInfo and cuDeviceTotalMem show a
device no larger than the limit; a new limit applies at once, one sent before REGISTERED to the
first allocation. On a 64 MiB simulated device, with `scripted` (scripted_scheduler.py).
"""

from __future__ import annotations

import pytest
from gemshare_nvs import protocol as p

from libnvs_programs import wait_file, wait_for
from scripted_scheduler import ScriptedScheduler

MIB = 1 << 20
DEVICE = 64 * MIB
DEBUG = {"GEMSHARE_DEBUG": "1"}
DEVICE_MEMORY = {"GEMSHARE_UNIFIED_MEMORY": "0"}


def allocate(api: str, name: str, mib: int) -> list:
    """The stand-in's steps that allocate `mib` MiB through `api`."""
    if api == "alloc-pitch":
        return [api, name, 1024, mib * 1024]  # rows of 1 KiB: a pitch every driver keeps
    return [api, name, f"{mib}M"]


# Every allocation path libnvs counts: converted, left to the driver, the program's own
# managed memory, pools, VMM.
PATHS = [
    pytest.param("alloc", {}, id="converted"),
    pytest.param("alloc", DEVICE_MEMORY, id="device"),
    pytest.param("alloc-pitch", {}, id="pitch-converted"),
    pytest.param("alloc-pitch", DEVICE_MEMORY, id="pitch-device"),
    pytest.param("alloc-managed", {}, id="managed"),
    pytest.param("alloc-async", {}, id="async-converted"),
    pytest.param("alloc-async", DEVICE_MEMORY, id="async-pool"),
    pytest.param("alloc-pool", {}, id="explicit-pool"),
    pytest.param("vmm-alloc", {}, id="vmm"),
]


def driver_allocations(gpu, pid) -> list:
    return [e for e in gpu.events()
            if e.pid == pid and (e.name.startswith("alloc_") or e.name == "vmm_create")]


def mem_info(result) -> list[tuple[int, int]]:
    return [(int(m["free"]), int(m["total"])) for m in result.steps("mem-info")]


@pytest.mark.parametrize("api, env", PATHS)
def test_an_allocation_past_the_limit_is_refused_and_nothing_of_it_remains(scripted, api, env):
    gpu, scheduler = scripted
    scheduler.memory_limit = 10 * MIB
    result = gpu.run(["init", *allocate(api, "a", 4), *allocate(api, "b", 8), "mem-info",
                      *allocate(api, "c", 6)], env={**DEBUG, **env})

    assert result.returncode == 3, result.describe()  # the one refusal
    first, refused, last = result.steps(api)
    assert first["result"] == last["result"] == "0", result.describe()
    assert refused["error"] == "CUDA_ERROR_OUT_OF_MEMORY", result.describe()
    # The refused bytes were never asked of the driver nor left counted: the room is what the
    # first allocation left, and the last one fills it exactly.
    assert len(driver_allocations(gpu, result.pid)) == 2
    assert mem_info(result) == [(6 * MIB, 10 * MIB)]
    why = [line for line in result.gemshare_lines() if "refused" in line and "limit" in line]
    assert any(f"memory limit is {10 * MIB} bytes" in line and f"holds {4 * MIB} bytes" in line
               and f"of {8 * MIB} bytes" in line for line in why), result.describe()


@pytest.mark.parametrize("env", [{}, DEVICE_MEMORY], ids=["unified", "device"])
def test_the_device_looks_no_larger_than_the_limit(scripted, env):
    gpu, scheduler = scripted
    scheduler.memory_limit = 16 * MIB
    result = gpu.run(["init", "total-mem", "mem-info", "alloc", "a", "4M", "mem-info"], env=env)
    assert result.returncode == 0, result.describe()
    assert int(result.ok("total-mem")["total"]) == 16 * MIB
    assert mem_info(result) == [(16 * MIB, 16 * MIB), (12 * MIB, 16 * MIB)]


def test_without_a_limit_or_with_one_past_the_device_the_device_is_as_it_is(scripted):
    gpu, scheduler = scripted
    unlimited = gpu.run(["init", "total-mem", "alloc", "a", "4M", "mem-info"])
    scheduler.memory_limit = 1 << 40
    roomy = gpu.run(["init", "total-mem", "alloc", "a", "4M", "mem-info"])
    for result in (unlimited, roomy):
        assert result.returncode == 0, result.describe()
        assert int(result.ok("total-mem")["total"]) == DEVICE
        assert mem_info(result) == [(DEVICE - 4 * MIB, DEVICE)]


def test_a_limit_changed_at_run_time_applies_at_once(scripted):
    gpu, scheduler = scripted
    program = gpu.start(["init", "alloc", "a", "20M", "touch-file", gpu.path("allocated"),
                         "wait-file", gpu.path("lowered"), "alloc", "b", "1M", "mem-info",
                         "attr", "a", "touch-file", gpu.path("refused"),
                         "wait-file", gpu.path("lifted"), "alloc", "c", "1M", "mem-info"])
    wait_file(gpu.path("allocated"))
    scheduler.limit(program.pid, 16 * MIB)  # below what the program holds already
    gpu.path("lowered").touch()
    wait_file(gpu.path("refused"))
    scheduler.limit(program.pid, 0)
    gpu.path("lifted").touch()
    result = program.wait()

    assert result.returncode == 3, result.describe()
    allocated, refused, lifted = result.steps("alloc")
    assert allocated["result"] == lifted["result"] == "0", result.describe()
    assert refused["error"] == "CUDA_ERROR_OUT_OF_MEMORY", result.describe()
    assert result.ok("attr")["is_managed"] == "1"  # what it held before stays
    assert mem_info(result) == [(0, 16 * MIB), (DEVICE - 21 * MIB, DEVICE)]


def test_what_the_others_of_the_budget_hold_counts_against_the_limit(scripted):
    gpu, scheduler = scripted
    scheduler.memory_limit = 16 * MIB
    scheduler.budget_used = 6 * MIB  # the rest of its container
    result = gpu.run(["init", "alloc", "a", "4M", "mem-info", "alloc", "b", "8M",
                      "alloc", "c", "6M", "mem-info"], env=DEBUG)

    assert result.returncode == 3, result.describe()
    first, refused, last = result.steps("alloc")
    assert first["result"] == last["result"] == "0", result.describe()
    assert refused["error"] == "CUDA_ERROR_OUT_OF_MEMORY", result.describe()
    assert mem_info(result) == [(6 * MIB, 16 * MIB), (0, 16 * MIB)]
    assert any(f"holds {4 * MIB} bytes on device 0, the others sharing its budget {6 * MIB}"
               in line for line in result.gemshare_lines()), result.describe()


def test_a_change_of_what_the_others_hold_applies_at_once(scripted):
    gpu, scheduler = scripted
    scheduler.memory_limit = 16 * MIB
    program = gpu.start(["init", "alloc", "a", "4M", "touch-file", gpu.path("allocated"),
                         "wait-file", gpu.path("crowded"), "mem-info", "alloc", "b", "4M",
                         "touch-file", gpu.path("refused"), "wait-file", gpu.path("left"),
                         "mem-info", "alloc", "c", "4M"])
    wait_file(gpu.path("allocated"))
    scheduler.limit(program.pid, 16 * MIB, budget_used=10 * MIB)
    gpu.path("crowded").touch()
    wait_file(gpu.path("refused"))
    scheduler.limit(program.pid, 16 * MIB, budget_used=0)
    gpu.path("left").touch()
    result = program.wait()

    assert result.returncode == 3, result.describe()
    allocated, refused, after = result.steps("alloc")
    assert allocated["result"] == after["result"] == "0", result.describe()
    assert refused["error"] == "CUDA_ERROR_OUT_OF_MEMORY", result.describe()
    assert mem_info(result) == [(2 * MIB, 16 * MIB), (12 * MIB, 16 * MIB)]


def test_a_limit_sent_before_registered_binds_the_first_allocation(scripted):
    gpu, scheduler = scripted
    scheduler.memory_limit = 8 * MIB
    scheduler.registration_delay = 0.5  # the program allocates long before the answer comes
    result = gpu.run(["init", "alloc", "a", "16M"])
    assert result.one("alloc")["error"] == "CUDA_ERROR_OUT_OF_MEMORY", result.describe()
    assert not driver_allocations(gpu, result.pid)


def test_the_limit_outlives_the_scheduler_until_a_registration_without_one(scripted):
    gpu, scheduler = scripted
    scheduler.memory_limit = 8 * MIB
    program = gpu.start(["init", "alloc", "a", "4M", "touch-file", gpu.path("limited"),
                         "wait-file", gpu.path("gone"), "alloc", "b", "8M",
                         "touch-file", gpu.path("unscheduled"), "wait-file", gpu.path("back"),
                         "alloc", "c", "8M"])
    wait_file(gpu.path("limited"))
    scheduler.close()
    wait_for(lambda: any("lost the scheduler" in line
                         for line in program.result().gemshare_lines()),
             "the program to notice that the scheduler is gone")
    gpu.path("gone").touch()
    wait_file(gpu.path("unscheduled"))
    scheduler.socket.unlink()
    successor = ScriptedScheduler(scheduler.socket.parent)  # no limit for anyone
    try:
        successor.wait_registered(program.pid)
        successor.evict(program.pid, 0)  # handled after REGISTERED: the program has seen it
        successor.wait_moved_done(program.pid)
        gpu.path("back").touch()
        result = program.wait()
    finally:
        successor.close()

    assert result.returncode == 3, result.describe()
    first, unscheduled, registered = result.steps("alloc")
    assert first["result"] == registered["result"] == "0", result.describe()
    assert unscheduled["error"] == "CUDA_ERROR_OUT_OF_MEMORY", result.describe()


@pytest.mark.parametrize("label, sent", [
    ("nightly-train", "nightly-train"),
    (None, ""),
    ("x" * 100, "x" * 63),  # cut to the field, with room for its NUL
], ids=["set", "unset", "too-long"])
def test_register_carries_the_label(scripted, label, sent):
    gpu, scheduler = scripted
    env = {} if label is None else {"GEMSHARE_LABEL": label}
    result = gpu.run(["init", "mem-info"], env=env)  # mem-info waits for the registration
    assert result.returncode == 0, result.describe()
    ((_, register),) = scheduler.wait_for(result.pid, p.Register)
    assert register.label == sent
