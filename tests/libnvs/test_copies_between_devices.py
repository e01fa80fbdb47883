"""Copies between two devices pass the gates of both: a program on devices 0 and 1 copying from
one to the other waits for both locks, taking the gates in device order. The
fake driver has two devices here (see test_devices.py); each buffer remembers the context it
was made in, so `copy-peer` names both sides' contexts, `copy-dtod` only their pointers and
`copy-2d`/`copy-3d` their pointers in a structure."""

from __future__ import annotations

import re
import time

import libnvs_fakelog as fakelog
import pytest
from libnvs_programs import NO_EARLY_RELEASE, client_of, scheduler_status, wait_file, wait_for
from test_devices import FOREVER, TWO_DEVICES, devices_of

COPIES = ("copy-peer", "copy-dtod", "copy-2d", "copy-3d")


def waits_for(scheduler, pid: int, device: int) -> dict:
    """The program's client entry once it waits for the device's lock."""
    def found():
        status = scheduler_status(scheduler.socket)
        client = client_of(status, pid)
        waiting = devices_of(status).get(device, {}).get("waiters", [])
        return client if client and client["id"] in waiting else None
    return wait_for(found, f"pid {pid} waiting for device {device}")


def hold_device_1(gpu):
    """A program that holds device 1 until the file "end" appears."""
    holder = gpu.start(["init", "device", 1, "launch", 100, "sync",
                        "touch-file", gpu.path("held"), "wait-file", gpu.path("end")],
                       env={**TWO_DEVICES, **NO_EARLY_RELEASE})
    wait_file(gpu.path("held"))
    return holder


def copy_0_to_1(gpu, env: dict, copy: str = "copy-peer"):
    """A program with a buffer on each device that works on device 0, then copies its device 0
    buffer to its device 1 buffer."""
    return gpu.start(["init", "alloc", "a", "1M", "device", 1, "alloc", "b", "1M",
                      "device", 0, "launch", 100, "sync", copy, "b", "a", "sync"],
                     env={**TWO_DEVICES, **env})


def all_succeed(*programs) -> None:
    for program in programs:
        result = program.wait(timeout=30)
        assert result.returncode == 0, result.describe()


def copy_starts(events: list, pid: int) -> list[int]:
    """When the program's own copies between devices began to run (not libnvs's moves)."""
    seqs = {e.get("seq") for e in fakelog.named(events, "memcpy", pid=pid)
            if e.get("api", "").startswith(("cuMemcpyPeer", "cuMemcpyDtoD", "cuMemcpy2D",
                                            "cuMemcpy3D"))}
    return [e.ns for e in fakelog.named(events, "exec_begin", pid=pid) if e.get("seq") in seqs]


@pytest.mark.parametrize("copy", COPIES)
def test_a_copy_to_another_device_waits_for_that_devices_lock(gpu_with, copy):
    gpu, scheduler = gpu_with(**FOREVER)
    holder = hold_device_1(gpu)
    copier = copy_0_to_1(gpu, NO_EARLY_RELEASE, copy)
    waiting = waits_for(scheduler, copier.pid, 1)
    assert devices_of(scheduler_status(scheduler.socket))[0]["holders"] == [waiting["id"]]
    assert not copy_starts(gpu.events(), copier.pid), \
        "the copy ran while another process held the device it writes to"
    gpu.path("end").touch()
    all_succeed(holder, copier)
    assert len(copy_starts(gpu.events(), copier.pid)) == 1


def test_copies_in_opposite_directions_never_hold_one_lock_waiting_for_the_other(gpu_with):
    """Each program holds one device and copies to the other's. Both finish, with no revocation:
    had each program let go of what it held while waiting for the rest, the two would swap
    locks at every quantum and copy nothing; had each kept its own device, neither could drop
    it until revoked after the grace (10 s)."""
    gpu, scheduler = gpu_with(tq=1, min_slice_ms=100)
    programs = []
    for own, other in ((0, 1), (1, 0)):
        programs.append(gpu.start(
            ["init", "device", other, "alloc", "theirs", "1M", "device", own, "alloc", "mine",
             "1M", "launch", 100, "sync", "touch-file", gpu.path(f"holds-{own}"),
             "wait-file", gpu.path("go"), *["copy-peer", "theirs", "mine", "sync"] * 5],
            env={**TWO_DEVICES, **NO_EARLY_RELEASE}))
    for own in (0, 1):
        wait_file(gpu.path(f"holds-{own}"))
    gpu.path("go").touch()
    all_succeed(*programs)
    for program in programs:
        assert len(copy_starts(gpu.events(), program.pid)) == 5
    log = scheduler.log()
    assert "revoke" not in log, log


def test_a_program_waiting_for_a_copy_does_not_release_its_other_device_as_idle(gpu_with):
    """Waiting at device 1's gate for a copy, the program keeps device 0's: that is no idle
    time there, so its lock stays until the quantum asks for it."""
    gpu, scheduler = gpu_with(**FOREVER)
    holder = hold_device_1(gpu)
    copier = copy_0_to_1(gpu, {"GEMSHARE_IDLE_RELEASE_MS": "100"})
    client = waits_for(scheduler, copier.pid, 1)
    # Someone else asks for device 0: an idle holder there would give it up within 100 ms.
    other = gpu.start(["init", "launch", 100, "sync"], env=TWO_DEVICES)
    waits_for(scheduler, other.pid, 0)
    time.sleep(0.6)
    assert devices_of(scheduler_status(scheduler.socket))[0]["holders"] == [client["id"]]
    gpu.path("end").touch()
    all_succeed(holder, copier, other)


def test_a_drop_of_a_device_kept_for_a_copy_lets_it_go_at_once(gpu_with, short_tmp_dirs):
    """A gpu_limit drops a holder whatever it waits for: the copy waiting for device 1 lets
    go of device 0's gate so that the drop drains, rather than stall the program's handoffs
    until the scheduler revokes it after the grace."""
    directory = short_tmp_dirs()
    (directory / "gemshare.toml").write_text(
        '[[rule]]\nmatch = { label = "limited" }\ngpu_limit = 0.05\n')
    gpu, scheduler = gpu_with(directory=directory, **FOREVER)
    holder = hold_device_1(gpu)
    copier = copy_0_to_1(gpu, {**NO_EARLY_RELEASE, "GEMSHARE_LABEL": "limited"})
    waits_for(scheduler, copier.pid, 1)
    # 0.05 of the usage window is about 2.2 s of holding device 0.
    wait_for(lambda: [line for line in scheduler.log().splitlines()
                      if f"pid {copier.pid}," in line and "release" in line
                      and "device 0 after drop" in line], "the limit's drop answered")
    log = scheduler.log()
    assert "gpu limit 0.05 reached" in log and "revoke" not in log, log
    gpu.path("end").touch()
    assert holder.wait().returncode == 0


def test_a_copy_waiting_behind_a_plain_request_says_it_keeps_its_lower_devices(gpu_with):
    """A thread of the program already waits for device 1 for its own work when the copy comes
    to wait there too: the request goes out again with REQUEST_KEEPING, which the scheduler
    takes as such."""
    gpu, scheduler = gpu_with(**FOREVER)
    holder = hold_device_1(gpu)
    copier = gpu.start(["init", "alloc", "a", "1M", "device", 1, "alloc", "b", "1M",
                        "thread-start", 1, 100, "wait-file", gpu.path("copy"),
                        "device", 0, "launch", 100, "sync", "copy-peer", "b", "a", "sync",
                        "thread-join"], env={**TWO_DEVICES, **NO_EARLY_RELEASE})
    waiting = waits_for(scheduler, copier.pid, 1)  # the thread's own, plain request
    assert "keeping" not in scheduler.log()
    gpu.path("copy").touch()
    keeping = rf"request client {waiting['id']} \(pid {copier.pid},[^\n]*device 1, keeping"
    wait_for(lambda: re.search(keeping, scheduler.log()), "the request saying it keeps")
    gpu.path("end").touch()
    all_succeed(holder, copier)
