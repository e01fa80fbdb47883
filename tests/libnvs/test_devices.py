"""Locks per device: a process takes the lock of each device it works on, and only that device's
lock. The fake driver has two devices here (FAKECUDA_DEVICE_COUNT=2); the stand-in's `device N`
step moves it to device N as cudaSetDevice does, and the fake's log says on which device each
piece of work ran. Each process's work runs on its own simulated device thread, so work of two
processes overlaps in the log exactly when nothing keeps them apart."""

from __future__ import annotations

import libnvs_fakelog as fakelog
from libnvs_programs import (NO_EARLY_RELEASE, client_of, grants, scheduler_status,
                             wait_file, wait_for, wait_for_client)

TWO_DEVICES = {"FAKECUDA_DEVICE_COUNT": "2"}
# No quantum and no share ever takes a lock away: only a release or an exit hands it on.
FOREVER = {"tq": 86400, "min_slice_ms": 3_600_000}
KERNEL_US = 100_000


def devices_of(status: dict) -> dict[int, dict]:
    """Status entries by device index; a device nobody holds or waits for may have none."""
    return {device["index"]: device for device in status["devices"]}


def holders(status: dict, device: int) -> list[int]:
    return devices_of(status).get(device, {}).get("holders", [])


def ran_on(events: list, pid: int) -> set[str]:
    """The devices on which the process's work ran."""
    return {e["device"] for e in fakelog.named(events, "exec_begin", pid=pid)
            if e.get("op") in fakelog.WORK_OPS}


def test_processes_on_different_devices_run_at_once(gpu_with):
    gpu, scheduler = gpu_with(**FOREVER)
    env = {**TWO_DEVICES, **NO_EARLY_RELEASE}
    # Two seconds of work each; neither gives its lock back before "end".
    programs = {device: gpu.start(["init", "device", device, "launch", 2_000_000,
                                   "touch-file", gpu.path(f"launched-{device}"),
                                   "wait-file", gpu.path("end"), "sync"], env=env)
                for device in (1, 0)}
    for device in programs:
        wait_file(gpu.path(f"launched-{device}"))
    status = scheduler_status(scheduler.socket)
    clients = {device: client_of(status, p.pid) for device, p in programs.items()}
    assert {c["state"] for c in clients.values()} == {"holding"}, status
    devices = devices_of(status)
    assert devices[0]["holders"] == [clients[0]["id"]]
    assert devices[1]["holders"] == [clients[1]["id"]]
    gpu.path("end").touch()
    for program in programs.values():
        result = program.wait()
        assert result.returncode == 0, result.describe()
    events = gpu.events()
    assert ran_on(events, programs[0].pid) == {"0"}
    assert ran_on(events, programs[1].pid) == {"1"}
    assert fakelog.overlapping(fakelog.exec_intervals(events, programs[0].pid),
                               fakelog.exec_intervals(events, programs[1].pid)), \
        "work on device 0 waited for work on device 1"


def test_processes_on_one_device_take_turns_there(gpu_with):
    gpu, scheduler = gpu_with(tq=1)
    steps = ["init", "device", 1, "touch-file", None, "wait-file", gpu.path("go"),
             *["launch", KERNEL_US, "stream-sync"] * 20]
    programs = []
    for i in range(2):
        steps[4] = gpu.path(f"ready-{i}")
        programs.append(gpu.start(list(steps), env=TWO_DEVICES))
    for i in range(2):
        wait_file(gpu.path(f"ready-{i}"))
    gpu.path("go").touch()
    a, b = (program.wait() for program in programs)
    for result in (a, b):
        assert result.returncode == 0, result.describe()
    events = gpu.events()
    assert ran_on(events, a.pid) == ran_on(events, b.pid) == {"1"}
    runs_a, runs_b = fakelog.exec_intervals(events, a.pid), fakelog.exec_intervals(events, b.pid)
    assert len(runs_a) == len(runs_b) == 20
    assert not fakelog.overlapping(runs_a, runs_b), "both processes ran on device 1 at once"
    assert fakelog.switches(events, {a.pid, b.pid}) >= 2, "no turns: one process ran to the end"


def test_a_process_on_two_devices_holds_both_locks(gpu_with):
    gpu, scheduler = gpu_with(**FOREVER)
    env = {**TWO_DEVICES, **NO_EARLY_RELEASE}
    both = gpu.start(["init", "launch", 100, "device", 1, "launch", 100, "sync",
                      "touch-file", gpu.path("held"), "wait-file", gpu.path("end"),
                      "launch", 100, "sync"], env=env)
    wait_file(gpu.path("held"))
    waiter = gpu.start(["init", "device", 1, "launch", 100, "sync"], env=env)
    wait_for_client(scheduler.socket, waiter.pid, state="waiting")
    status = scheduler_status(scheduler.socket)
    holder, waiting = client_of(status, both.pid), client_of(status, waiter.pid)
    devices = devices_of(status)
    assert holder["state"] == "holding"
    assert devices[0]["holders"] == [holder["id"]] and devices[1]["holders"] == [holder["id"]]
    assert devices[1]["waiters"] == [waiting["id"]] and devices[0]["waiters"] == []
    assert not fakelog.named(gpu.events(), "launch", pid=waiter.pid), \
        "the waiter launched on device 1 while the other process held it"
    gpu.path("end").touch()
    for program in (both, waiter):
        result = program.wait()
        assert result.returncode == 0, result.describe()
    events = gpu.events()
    assert ran_on(events, both.pid) == {"0", "1"}
    assert ran_on(events, waiter.pid) == {"1"}


def test_an_idle_device_is_released_while_another_stays_busy(gpu_with):
    gpu, scheduler = gpu_with(**FOREVER)
    # Device 1 once, then device 0 without a pause for far longer than the idle time.
    busy = gpu.start(["init", "device", 1, "launch", 100, "sync", "device", 0,
                      "touch-file", gpu.path("on-0"),
                      *["launch", 50_000, "stream-sync"] * 400],
                     env={**TWO_DEVICES, "GEMSHARE_IDLE_RELEASE_MS": "250"})
    wait_file(gpu.path("on-0"))
    client_id = wait_for_client(scheduler.socket, busy.pid)["id"]

    def released_1_holding_0():
        status = scheduler_status(scheduler.socket)
        return client_id in holders(status, 0) and client_id not in holders(status, 1)
    wait_for(released_1_holding_0, "device 1 released early while device 0 stays held")
    # Another process now gets device 1 at once, while the first still works on device 0.
    other = gpu.run(["init", "device", 1, "launch", 100, "sync"], env=TWO_DEVICES)
    assert other.returncode == 0, other.describe()
    assert busy.process.poll() is None, "the busy process ended before the other ran"
    assert client_id in holders(scheduler_status(scheduler.socket), 0)
    assert any(f"pid {busy.pid}," in line and "device 1" in line and "early (idle)" in line
               for line in scheduler.log().splitlines()), scheduler.log()


def test_each_device_is_locked_by_its_gpu_whatever_the_process_calls_it(gpu_with):
    """Two processes that see other physical GPUs under the same ordinals: the scheduler keys
    each device of each process by its GPU's UUID, so the second one's devices 0 and 1 are GPUs
    the first never touches, and it runs on both while the first holds its device 0."""
    gpu, scheduler = gpu_with(**FOREVER)
    first = gpu.start(["init", "launch", 100, "sync", "touch-file", gpu.path("held"),
                       "wait-file", gpu.path("end")],
                      env={**TWO_DEVICES, **NO_EARLY_RELEASE, "FAKECUDA_GPU_SET": "1"})
    wait_file(gpu.path("held"))
    other = gpu.run(["init", "launch", 100, "sync", "device", 1, "launch", 100, "sync",
                     "launch", 100, "sync"], env={**TWO_DEVICES, "FAKECUDA_GPU_SET": "2"})
    assert other.returncode == 0, other.describe()
    assert "refused" not in other.stderr, other.describe()
    assert ran_on(gpu.events(), other.pid) == {"0", "1"}
    log = scheduler.log()
    mapped = [line for line in log.splitlines() if f"pid {other.pid}," in line and " is device "
              in line]
    assert len(mapped) == 2 and not any(line.endswith("is device 0") for line in mapped), log
    assert grants(log, other.pid) >= 2
    gpu.path("end").touch()
    assert first.wait().returncode == 0


def test_the_registered_device_is_named_first_whichever_device_is_used_first(gpu_with):
    """The scheduler renumbers a process by its registered device's UUID only before its first
    lock request: that UUID goes out first even when the process starts on device 1."""
    gpu, scheduler = gpu_with(**FOREVER)
    program = gpu.start(["init", "device", 1, "launch", 100, "sync", "touch-file",
                         gpu.path("held"), "wait-file", gpu.path("end")],
                        env={**TWO_DEVICES, **NO_EARLY_RELEASE, "FAKECUDA_GPU_SET": "3"})
    wait_file(gpu.path("held"))
    status = scheduler_status(scheduler.socket)
    client = client_of(status, program.pid)
    # The fake's UUID bytes: "gemsharefake", two zeros, the GPU set, the ordinal.
    assert client["gpu_uuid"] == "GPU-67656d73-6861-7265-6661-6b6500000300"
    assert holders(status, 1) == [client["id"]]
    gpu.path("end").touch()
    assert program.wait().returncode == 0

def test_threads_launching_on_a_second_device_without_races(gpu_with, tsan_preload):
    """Contexts on two devices: every launch finds its device on the slow path, from many
    threads at once, under ThreadSanitizer, while device 1's lock changes hands."""
    gpu, scheduler = gpu_with(tq=1)
    env = {**TWO_DEVICES, "TSAN_OPTIONS": "halt_on_error=1 exitcode=66"}
    programs = [gpu.start(["init", "device", 1, "alloc", "buf", "4M",
                           "touch-file", gpu.path(f"ready-{i}"), "wait-file", gpu.path("go"),
                           *["threads", 8, 15, 5000] * 3, "sync"],
                          preload=tsan_preload, env=env) for i in range(2)]
    for i in range(2):
        wait_file(gpu.path(f"ready-{i}"))
    gpu.path("go").touch()
    results = [p.wait(timeout=120) for p in programs]
    for result in results:
        assert "ThreadSanitizer" not in result.stderr, result.stderr
        assert result.returncode == 0, result.describe()
        assert [s["failed"] for s in result.steps("threads")] == ["0"] * 3
    events = gpu.events()
    a, b = results
    assert ran_on(events, a.pid) == ran_on(events, b.pid) == {"1"}
    assert not fakelog.overlapping(fakelog.exec_intervals(events, a.pid),
                                   fakelog.exec_intervals(events, b.pid))


def test_work_past_the_gated_devices_runs_ungated_and_says_so_once(gpu_with):
    """Device 17 of 20: no lock exists for it, so its work runs at once beside the holder of
    device 0, after one stderr line; the scheduler hears no request for it and keeps no lock."""
    gpu, scheduler = gpu_with(**FOREVER)
    env = {"FAKECUDA_DEVICE_COUNT": "20", **NO_EARLY_RELEASE}
    holder = gpu.start(["init", "launch", 100, "sync", "touch-file", gpu.path("held"),
                        "wait-file", gpu.path("end")], env=env)
    wait_file(gpu.path("held"))
    far = gpu.run(["init", "device", 17, "alloc", "x", "1M", "launch", 100, "sync",
                   "launch", 100, "sync", "device", 19, "launch", 100, "sync"], env=env)
    assert far.returncode == 0, far.describe()
    assert far.stderr.count("gemshare takes locks for devices 0 to 15 only") == 1, far.stderr
    assert ran_on(gpu.events(), far.pid) == {"17", "19"}
    status = scheduler_status(scheduler.socket)
    assert all(device["index"] < 16 for device in status["devices"]), status
    assert client_of(status, far.pid) is None  # gone, and nothing of it left behind
    gpu.path("end").touch()
    assert holder.wait().returncode == 0
