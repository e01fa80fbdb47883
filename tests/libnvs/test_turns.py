"""Two programs sharing the GPU through libnvs.so and the real scheduler: turns in mode `on`,
free running in mode `off`, and early release of an idle holder.

Each process's work runs on its own simulated device thread, so their exec intervals in the fake
driver's log overlap exactly when nothing keeps them apart."""

from __future__ import annotations

import re
import time

from gemshare_nvs.wire.connection import Connection

import libnvs_fakelog as fakelog
from libnvs_programs import (client_of, grants, run_together, scheduler_status, wait_file,
                             wait_for_client)

KERNEL_US = 100_000  # 100 ms kernels


def test_mode_on_takes_turns_that_never_overlap(gpu_with):
    gpu, scheduler = gpu_with(tq=1)
    # 2 s of synchronized steps each: more than one 1 s quantum, so turns must happen.
    a, b = run_together(gpu, ["launch", KERNEL_US, "stream-sync"] * 20)
    events = gpu.events()
    runs_a = fakelog.exec_intervals(events, a.pid)
    runs_b = fakelog.exec_intervals(events, b.pid)
    assert len(runs_a) == len(runs_b) == 20
    assert not fakelog.overlapping(runs_a, runs_b), "both processes ran at once in mode on"
    assert fakelog.switches(events, {a.pid, b.pid}) >= 2, "no turns: one process ran to the end"
    log = scheduler.log()
    assert re.search(rf"drop client \d+ \(pid ({a.pid}|{b.pid}),", log), log
    assert grants(log, a.pid) >= 1 and grants(log, b.pid) >= 1


def test_mode_off_lets_both_run_at_once(gpu_with):
    gpu, scheduler = gpu_with(anti_thrash="off")
    a, b = run_together(gpu, ["launches", 8, KERNEL_US, "sync"])
    events = gpu.events()
    overlap = fakelog.overlapping(fakelog.exec_intervals(events, a.pid),
                                  fakelog.exec_intervals(events, b.pid))
    assert overlap, "in mode off the two processes never ran at the same time"
    assert grants(scheduler.log(), a.pid) == grants(scheduler.log(), b.pid) == 0


def hold_then_idle(gpu, idle_release_ms: str):
    """Takes the lock with one 300 ms kernel, then submits nothing more (and never exits)."""
    return gpu.start(["init", "launch", 300_000, "touch-file", gpu.path("submitted"),
                      "wait-file", gpu.path("never")],
                     env={"GEMSHARE_IDLE_RELEASE_MS": idle_release_ms})


def test_an_idle_holder_releases_early_once_its_work_drained(gpu_with):
    # With a quantum and a minimum slice of hours, only an early release can let the second
    # process run.
    gpu, scheduler = gpu_with(tq=86400, min_slice_ms=3_600_000)
    idle = hold_then_idle(gpu, "250")
    wait_file(gpu.path("submitted"))
    waiter = gpu.run(["init", "launch", 100, "sync"])
    assert waiter.returncode == 0, waiter.describe()
    assert idle.process.poll() is None, "the holder exited instead of releasing"
    events = gpu.events()
    (held_kernel,) = fakelog.exec_intervals(events, idle.pid)
    (waiter_kernel,) = fakelog.exec_intervals(events, waiter.pid)
    assert waiter_kernel[0] > held_kernel[1], "the lock moved before the holder's work drained"
    assert re.search(rf"release client \d+ \(pid {idle.pid},.*early \(idle\)", scheduler.log())


def test_without_early_release_the_waiter_keeps_waiting(gpu_with):
    # The newcomer, under its share, would take the lock after the minimum slice: an hour here.
    gpu, scheduler = gpu_with(tq=86400, min_slice_ms=3_600_000)
    idle = hold_then_idle(gpu, "0")  # 0 turns early release off
    wait_file(gpu.path("submitted"))
    waiter = gpu.start(["init", "launch", 100, "sync"])
    wait_for_client(scheduler.socket, waiter.pid, state="waiting")
    time.sleep(1.0)  # four times the default idle time: a release would have happened
    status = scheduler_status(scheduler.socket)
    assert client_of(status, idle.pid)["state"] == "holding"
    assert client_of(status, waiter.pid)["state"] == "waiting"
    assert not fakelog.named(gpu.events(), "launch", pid=waiter.pid)
    idle.kill()
    assert waiter.wait().returncode == 0


def set_mode(scheduler, mode: str) -> None:
    with Connection(scheduler.socket) as control:
        reply = control.request({"op": "set", "anti_thrash": mode})
    assert reply.get("ok"), reply


def test_switching_to_mode_off_frees_a_waiter_and_back_on_restores_the_lock(gpu_with):
    gpu, scheduler = gpu_with(tq=86400)
    holder = gpu.start(["init", "launch", 100, "sync", "touch-file", gpu.path("held"),
                        "wait-file", gpu.path("on-again"), "launch", 100, "sync"],
                       env={"GEMSHARE_IDLE_RELEASE_MS": "0"})
    wait_file(gpu.path("held"))
    waiter = gpu.start(["init", "launch", 100, "sync"])
    wait_for_client(scheduler.socket, waiter.pid, state="waiting")
    set_mode(scheduler, "off")
    assert waiter.wait().returncode == 0
    assert holder.process.poll() is None
    set_mode(scheduler, "on")
    gpu.path("on-again").touch()
    result = holder.wait()
    assert result.returncode == 0, result.describe()
    assert grants(scheduler.log(), holder.pid) == 2, "mode on again did not bring the lock back"
