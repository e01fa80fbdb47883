"""Processes that die holding the GPU lock, and processes that fork."""

from __future__ import annotations

import re
import signal

import libnvs_fakelog as fakelog
from libnvs_programs import (client_of, grants, scheduler_status, start_holder, wait_file,
                             wait_for, wait_for_client)


def test_when_the_holder_is_killed_the_waiter_proceeds(gpu_with):
    gpu, scheduler = gpu_with(tq=86400)
    holder = start_holder(gpu, ["launches", 5, 100_000])  # killed with work still queued
    waiter = gpu.start(["init", "launch", 100, "sync"])
    wait_for_client(scheduler.socket, waiter.pid, state="waiting")
    assert not fakelog.named(gpu.events(), "launch", pid=waiter.pid)
    holder.process.send_signal(signal.SIGKILL)
    result = waiter.wait()
    assert result.returncode == 0, result.describe()
    log = scheduler.log()
    assert re.search(rf"disconnect client \d+ \(pid {holder.pid},.*held device 0", log), log
    assert grants(log, waiter.pid) == 1


def registrations(log: str, pid: int) -> int:
    return len(re.findall(rf"\bregister client \d+ \(pid {pid},", log))


def test_a_forked_child_registers_as_a_client_of_its_own(gpu_with):
    """The parent only looked the driver up (which starts libnvs) before forking, so the child
    may initialize CUDA; it must do so on a connection of its own, with its own lock."""
    gpu, scheduler = gpu_with(tq=86400)
    program = gpu.start(["touch-file", gpu.path("parent-ready"), "wait-file", gpu.path("fork"),
                         "fork", "init", "launch", 100, "sync", "touch-file",
                         gpu.path("child-ready"), "wait-file", gpu.path("child-go"), "end",
                         "init", "launch", 100, "sync"])
    wait_file(gpu.path("parent-ready"))
    parent = wait_for_client(scheduler.socket, program.pid)
    gpu.path("fork").touch()
    wait_file(gpu.path("child-ready"))
    child_pid = int(wait_for(lambda: re.search(r"^init pid=(\d+)", program.output(), re.M),
                             "the child's init line").group(1))
    assert child_pid != program.pid
    status = scheduler_status(scheduler.socket)
    child = client_of(status, child_pid)
    assert child is not None, f"the child is no client of its own: {status['clients']}"
    assert child["id"] != parent["id"]
    assert client_of(status, program.pid)["id"] == parent["id"]
    gpu.path("child-go").touch()
    result = program.wait()
    assert result.returncode == 0, result.describe()
    log = scheduler.log()
    assert grants(log, child_pid) == 1 and grants(log, program.pid) == 1, log
    assert registrations(log, program.pid) == 1, "the parent had to register again"


def test_a_child_of_an_initialized_parent_leaves_the_parent_s_connection_alone(gpu_with):
    """CUDA is unusable in a child forked after cuInit; whatever the child tries, the parent's
    registration and lock must be untouched."""
    gpu, scheduler = gpu_with(tq=86400)
    program = gpu.start(["init", "launch", 100, "sync", "touch-file", gpu.path("registered"),
                         "wait-file", gpu.path("fork"),
                         "fork", "alloc", "a", "1M", "launch", 100, "sync", "end",
                         "launch", 100, "sync", "touch-file", gpu.path("after"),
                         "wait-file", gpu.path("end")])
    wait_file(gpu.path("registered"))
    before = wait_for_client(scheduler.socket, program.pid)
    gpu.path("fork").touch()
    wait_file(gpu.path("after"))
    after = client_of(scheduler_status(scheduler.socket), program.pid)
    gpu.path("end").touch()
    result = program.wait()
    _, child_launch, parent_again = result.steps("launch")
    assert child_launch["result"] != "0"  # the driver refuses it, as on a real GPU
    assert parent_again["result"] == "0" and result.steps("sync")[-1]["result"] == "0"
    assert after is not None and after["id"] == before["id"]
    log = scheduler.log()
    assert registrations(log, program.pid) == 1, log
    assert "protocol" not in log.lower(), log
