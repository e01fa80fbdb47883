"""Gangs end to end: the processes of one job (GEMSHARE_GANG, as a launcher's environment would
say) are granted their devices together by the real scheduler, take whole turns with a process
that wants the same devices, and lose every lock at once when one of them dies. Two fake devices,
each process's work on its own simulated device thread, so the fake's log shows who ran when."""

from __future__ import annotations

import os
import signal
import time

import libnvs_fakelog as fakelog
from libnvs_programs import NO_EARLY_RELEASE, scheduler_status, wait_file, wait_for

TWO_DEVICES = {"FAKECUDA_DEVICE_COUNT": "2"}
KERNEL_US = 50_000
LAUNCHES = 30


def member_steps(device: int, ready, go) -> list:
    return ["init", "device", device, "touch-file", ready, "wait-file", go,
            *["launch", KERNEL_US, "stream-sync"] * LAUNCHES]


def segments(events: list, owner: dict[int, str]) -> list[tuple[str, set[int]]]:
    """The device work in start order, cut where it passes between the gang and the others:
    (whose, pids that ran in that stretch)."""
    result: list[tuple[str, set[int]]] = []
    for event in fakelog.named(events, "exec_begin"):
        if event.pid not in owner or event.get("op") not in fakelog.WORK_OPS:
            continue
        whose = owner[event.pid]
        if not result or result[-1][0] != whose:
            result.append((whose, set()))
        result[-1][1].add(event.pid)
    return result


def test_a_gang_and_a_process_on_its_devices_take_whole_turns(gpu_with):
    gpu, scheduler = gpu_with(tq=1)
    env = {**TWO_DEVICES, **NO_EARLY_RELEASE}
    members = [gpu.start(member_steps(device, gpu.path(f"ready-{device}"), gpu.path("go")),
                         env={**env, "GEMSHARE_GANG": "train-7:2"}) for device in (0, 1)]
    single = gpu.start(["init", "touch-file", gpu.path("ready-single"), "wait-file",
                        gpu.path("go"), *["launch", KERNEL_US, "device", 1, "launch", KERNEL_US,
                                          "sync", "device", 0] * LAUNCHES], env=env)
    for name in ("ready-0", "ready-1", "ready-single"):
        wait_file(gpu.path(name))
    # Each member says GANG as its client thread registers, which may follow its ready file.
    wait_for(lambda: [(g["name"], g["state"], len(g["members"]))
                      for g in scheduler_status(scheduler.socket)["gangs"]]
             == [("train-7", "complete", 2)], "the gang complete")
    gpu.path("go").touch()
    for program in (*members, single):
        result = program.wait()
        assert result.returncode == 0, result.describe()
    owner = {members[0].pid: "gang", members[1].pid: "gang", single.pid: "single"}
    stretches = segments(gpu.events(), owner)
    assert sum(whose == "gang" for whose, _ in stretches) >= 2, stretches
    assert sum(whose == "single" for whose, _ in stretches) >= 2, stretches
    # In every turn of the gang but its last (where one member may have finished), both ran.
    gang_turns = [pids for whose, pids in stretches if whose == "gang"]
    assert all(len(pids) == 2 for pids in gang_turns[:-1]), stretches
    log = scheduler.log()
    assert "grant gang 'train-7'" in log and "devices 0, 1 together" in log
    # Only the end of the job takes a lock away: the first member to exit breaks the gang.
    assert all("its gang lost" in line for line in log.splitlines() if "revoke client" in line)


def test_a_member_that_dies_frees_every_lock_of_its_gang_at_once(gpu_with):
    gpu, scheduler = gpu_with(tq=86400, min_slice_ms=3_600_000)
    env = {**TWO_DEVICES, **NO_EARLY_RELEASE, "GEMSHARE_GANG": "train-8:2"}
    members = [gpu.start(["init", "device", device, "launch", 100, "sync", "touch-file",
                          gpu.path(f"held-{device}"), "wait-file", gpu.path("never")],
                         env=env) for device in (0, 1)]
    for device in (0, 1):
        wait_file(gpu.path(f"held-{device}"))
    waiter = gpu.start(["init", "device", 1, "launch", 100, "sync"],
                       env={**TWO_DEVICES, **NO_EARLY_RELEASE})
    wait_for(lambda: any(d["index"] == 1 and d["waiters"] for d in
                         scheduler_status(scheduler.socket)["devices"]), "the waiter queues")
    killed_at = time.monotonic_ns()
    os.kill(members[0].pid, signal.SIGKILL)
    result = waiter.wait()
    assert result.returncode == 0, result.describe()
    (first,) = fakelog.named(gpu.events(), "launch", pid=waiter.pid)[:1]
    assert (first.ns - killed_at) / 1e9 < 0.5, "the gang's other lock was not freed at once"
    log = scheduler.log()
    assert "its gang lost" in log and "a member left, so the gang is broken" in log
    members[1].kill()


def test_the_gang_comes_from_the_launchers_environment(gpu_with):
    gpu, scheduler = gpu_with()
    launchers = {
        "torchrun": {"TORCHELASTIC_RUN_ID": "abc", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "4",
                     "RANK": "3"},
        "master": {"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29500", "WORLD_SIZE": "2"},
        "given": {"GEMSHARE_GANG": "job:3", "TORCHELASTIC_RUN_ID": "ignored"},
        "off": {"GEMSHARE_GANG": "off", "TORCHELASTIC_RUN_ID": "abc", "LOCAL_WORLD_SIZE": "2"},
        "alone": {"MASTER_ADDR": "h", "MASTER_PORT": "1", "WORLD_SIZE": "1"},
        "bad": {"GEMSHARE_GANG": "no-size-here"},
    }
    programs = {name: gpu.start(["init", "touch-file", gpu.path(name), "wait-file",
                                 gpu.path("end")], env=env) for name, env in launchers.items()}
    for name in launchers:
        wait_file(gpu.path(name))

    def all_registered():
        return len(scheduler_status(scheduler.socket)["clients"]) == len(launchers)
    wait_for(all_registered, "every program registered")
    status = scheduler_status(scheduler.socket)
    pid_of = {c["id"]: c["pid"] for c in status["clients"]}
    gangs = {gang["name"]: (gang["size"], gang["world_size"],
                            [(pid_of[m["client"]], m["rank"]) for m in gang["members"]])
             for gang in status["gangs"]}
    assert gangs == {"torchelastic:abc": (2, 4, [(programs["torchrun"].pid, 3)]),
                     "master:10.1.2.3:29500": (2, 2, [(programs["master"].pid, 0)]),
                     "job": (3, 3, [(programs["given"].pid, 0)])}
    gpu.path("end").touch()
    results = {name: program.wait() for name, program in programs.items()}
    assert all(result.returncode == 0 for result in results.values())
    assert "ignoring GEMSHARE_GANG=no-size-here: expected NAME:SIZE" in results["bad"].stderr
    assert "GEMSHARE_GANG" not in results["off"].stderr
