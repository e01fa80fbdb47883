"""Shares of GPU time end to end: libnvs.so on the fake driver, the real scheduler process, and
its config file. A bursty program is served soon beside a busy one, weights divide lock time,
a rule's memory limit reaches the program, and a reload changes a running program's weight.

Counts and sums, not clocks, carry the assertions where they can: kernels the fake driver ran,
the scheduler's hold times, and the waits its log reports. Sleep kernels run in real time, so a
loaded machine only makes every program slower alike."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

import libnvs_fakelog as fakelog
from libnvs_programs import client_of, scheduler_status, wait_file, wait_for, wait_for_client

MIB = 1 << 20
KERNEL_US = 5_000  # short kernels: a drop drains within one of them


def busy(seconds: float) -> list:
    """A program's steps that keep the GPU busy for about `seconds`: kernels back to back."""
    return ["init", *["launch", KERNEL_US, "stream-sync"] * round(seconds * 1e6 / KERNEL_US)]


def labelled(label: str) -> dict:
    return {"GEMSHARE_LABEL": label}


def rule(label: str, **terms) -> str:
    """A config rule that gives programs labelled `label` these terms."""
    values = "".join(f"{name} = {value!r}\n" for name, value in terms.items())
    return f'[[rule]]\nmatch = {{ label = "{label}" }}\n{values}'


@pytest.fixture
def gpu_configured(gpu_with, short_tmp_dirs):
    """gpu_configured(config_text, **scheduler_options) -> (FakeGpu, scheduler, config file):
    a scheduler that starts on that config file."""
    def start(text: str, **options):
        directory = short_tmp_dirs()
        config = directory / "gemshare.toml"
        config.write_text(text)
        gpu, scheduler = gpu_with(directory=directory, **options)
        return gpu, scheduler, config

    return start


def kernels_ended(gpu, pid: int, begin_ns: int, end_ns: int) -> int:
    """How many of the process's kernels the simulated device finished in [begin, end)."""
    return sum(begin_ns <= end < end_ns
               for _, end in fakelog.exec_intervals(gpu.events(), pid, {"kernel"}))


def waits(log: str, pid: int) -> list[float]:
    """Each wait for the lock the scheduler logged at a grant to this process, in seconds."""
    return [float(s) for s in re.findall(
        rf"grant client \d+ \(pid {pid},[^\n]*after waiting ([\d.]+) s", log)]


# ----- a bursty program beside a busy one -----------------------------------------------------

BURSTS = 4
BURST_GAP_S = 2.0  # CPU-only time between bursts: far more than the min slice and a drain
SOLO_S = 3.0
# The busy program outlasts the bursts by this much, and no more: should a burst wait for the
# quantum, the busy program's end lets the rest through and the waits show it.
BUSY_SLACK_S = 10.0


def test_bursts_wait_little_and_the_busy_program_keeps_most_of_the_gpu(gpu_with):
    # With a 30 s quantum, only a waiter under its share taking the lock after the min slice can
    # serve a burst within a second.
    gpu, scheduler = gpu_with(tq=30)
    worker = gpu.start(busy(SOLO_S + BURSTS * BURST_GAP_S + BUSY_SLACK_S))
    wait_for_client(scheduler.socket, worker.pid, state="holding")
    solo_from = time.monotonic_ns()  # CLOCK_MONOTONIC, as the fake driver's log
    time.sleep(SOLO_S)
    bursty_from = time.monotonic_ns()
    bursty = gpu.run(["init", *["launch", KERNEL_US, "stream-sync",
                                "sleep-ms", round(BURST_GAP_S * 1000)] * BURSTS])
    bursty_to = time.monotonic_ns()
    log = scheduler.log()
    assert bursty.returncode == 0, bursty.describe()
    assert max(waits(log, bursty.pid), default=0) < 1.0, log
    assert len(waits(log, bursty.pid)) == BURSTS, log  # each burst found the busy one holding
    assert re.search(rf"drop client \d+ \(pid {worker.pid},[^\n]*under its share", log), log
    assert worker.process.poll() is None, "the busy program ended before the bursts did"
    # The busy program's rate of kernels alone, before the bursts, against its rate while they
    # came: each burst costs it the burst and the idle time before the release, not a turn.
    solo = kernels_ended(gpu, worker.pid, solo_from, bursty_from) / (bursty_from - solo_from)
    shared = kernels_ended(gpu, worker.pid, bursty_from, bursty_to) / (bursty_to - bursty_from)
    assert shared >= 0.7 * solo, (shared / solo, log)


# ----- weights -------------------------------------------------------------------------------

# Whole turns are compared, so the window's length only sets how many: five or so at TQ 2.
MEASURED_S = 14.0


def completed_hold(status: dict, client: dict) -> float:
    """The client's lock time in holds that have ended: status counts the running one too."""
    (device,) = status["devices"]
    return client["hold_time_s"] - device["slices_s"].get(str(client["id"]), 0.0)


def held_so_far(socket, heavy_pid: int, light_pid: int) -> tuple[float, float]:
    """Both programs' lock time in ended holds, read while the light one holds: as they take
    turns, two such readings enclose as many whole turns of one as of the other."""
    def light_holding():
        status = scheduler_status(socket)
        light = client_of(status, light_pid)
        return status if light and light["state"] == "holding" else None

    status = wait_for(light_holding, "the light program's turn")
    return (completed_hold(status, client_of(status, heavy_pid)),
            completed_hold(status, client_of(status, light_pid)))


def test_weights_three_to_one_give_lock_time_three_to_one(gpu_configured):
    gpu, scheduler, config = gpu_configured(rule("heavy", weight=3), tq=2)
    heavy = gpu.start(busy(60), env=labelled("heavy"))
    light = gpu.start(busy(60))
    client = wait_for_client(scheduler.socket, heavy.pid)
    assert client["weight"] == 3 and client["terms_from"]["weight"].startswith(
        f"config rule 1 ({config}:"), client
    assert wait_for_client(scheduler.socket, light.pid)["weight"] == 1

    first = held_so_far(scheduler.socket, heavy.pid, light.pid)
    time.sleep(MEASURED_S)
    last = held_so_far(scheduler.socket, heavy.pid, light.pid)
    heavy_s, light_s = (b - a for a, b in zip(first, last))
    assert light_s > 0 and 2.7 <= heavy_s / light_s <= 3.3, \
        (heavy_s, light_s, scheduler.log())  # 3:1 within 10%
    for program in (heavy, light):
        assert program.process.poll() is None, program.result().describe()


# ----- a memory limit from the config file ---------------------------------------------------

def test_a_rules_memory_limit_is_the_programs_device(gpu_configured):
    gpu, scheduler, _ = gpu_configured(rule("capped", memory_limit="16MiB"))
    steps = ["init", "total-mem", "mem-info", "alloc", "a", "12M", "alloc", "b", "8M",
             "mem-info"]
    capped = gpu.run(steps, env=labelled("capped"))
    unlabelled = gpu.run(steps)

    assert capped.returncode == 3, capped.describe()  # the one refusal
    assert int(capped.ok("total-mem")["total"]) == 16 * MIB
    kept, refused = capped.steps("alloc")
    assert kept["result"] == "0" and refused["error"] == "CUDA_ERROR_OUT_OF_MEMORY", \
        capped.describe()
    assert [(int(m["free"]), int(m["total"])) for m in capped.steps("mem-info")] == \
        [(16 * MIB, 16 * MIB), (4 * MIB, 16 * MIB)], capped.describe()
    # The rule matched only the label: the same program without it sees the whole device.
    assert unlabelled.returncode == 0, unlabelled.describe()
    assert int(unlabelled.ok("total-mem")["total"]) == 64 * MIB


# ----- reloading the config file --------------------------------------------------------------

@pytest.mark.parametrize("how", ["saved", "sighup"])
def test_a_reload_changes_a_running_programs_weight(gpu_configured, how):
    gpu, scheduler, config = gpu_configured(rule("notebook", weight=2))
    program = gpu.start(["init", "launch", 100, "sync", "touch-file", gpu.path("ran"),
                         "wait-file", gpu.path("reloaded"), "launch", 100, "sync"],
                        env=labelled("notebook"))
    wait_file(gpu.path("ran"))
    before = wait_for_client(scheduler.socket, program.pid, weight=2)

    if how == "saved":
        # As an editor saves: a new file moved into place, which the scheduler's polling sees.
        replacement = config.with_suffix(".new")
        replacement.write_text(rule("other", weight=1) + rule("notebook", weight=5))
        os.replace(replacement, config)
        source, why = "config rule 2", "the file changed"
    else:
        # Rewritten in place with its size and time kept, the change escapes the polling: only
        # the signal can bring it in.
        kept = config.stat()
        config.write_text(rule("notebook", weight=5))
        os.utime(config, ns=(kept.st_atime_ns, kept.st_mtime_ns))
        scheduler.process.send_signal(signal.SIGHUP)
        source, why = "config rule 1", "SIGHUP"
    after = wait_for_client(scheduler.socket, program.pid, weight=5)
    assert after["terms_from"]["weight"].startswith(f"{source} ({config}:"), after
    assert f"reloaded ({why})" in scheduler.log(), scheduler.log()
    assert after["id"] == before["id"], after  # the same connection

    gpu.path("reloaded").touch()
    result = program.wait()
    assert result.returncode == 0, result.describe()
    log = scheduler.log()
    assert len(re.findall(rf"register client \d+ \(pid {program.pid},", log)) == 1, log
