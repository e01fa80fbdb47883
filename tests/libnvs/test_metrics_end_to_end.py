"""The scheduler's Prometheus metrics, scraped over HTTP while two programs take turns on the
fake GPU through libnvs.so, agree with what happened: the grants and waits the scheduler
logged, the lock time and memory its status shows, per program (each labelled), and no series
left by a program that exited."""

from __future__ import annotations

import re

from libnvs_programs import client_of, scheduler_status, wait_file, wait_for, wait_for_client
from metrics_scrape import metrics_url, scrape

KERNEL_US = 100_000  # 100 ms kernels
M = 1 << 20
SIZES = {"a": 8 * M, "b": 12 * M}


def test_metrics_follow_two_programs_taking_turns(gpu_with):
    gpu, scheduler = gpu_with(tq=1, metrics="127.0.0.1:0")
    url = metrics_url(scheduler)
    # 2 s of work each, 1 s quanta: turns must happen. Then each stays connected, idle, until
    # told to exit.
    programs = {name: gpu.start(["init", "alloc", "buf", f"{size // M}M", "touch-file",
                                 gpu.path(f"ready-{name}"), "wait-file", gpu.path("go"),
                                 *["launch", KERNEL_US, "stream-sync"] * 20, "touch-file",
                                 gpu.path(f"done-{name}"), "wait-file", gpu.path(f"exit-{name}")],
                                env={"GEMSHARE_LABEL": name})
                for name, size in SIZES.items()}
    for name in SIZES:
        wait_file(gpu.path(f"ready-{name}"))
    gpu.path("go").touch()
    for name in SIZES:
        wait_file(gpu.path(f"done-{name}"))
    pids = {name: program.pid for name, program in programs.items()}
    for pid in pids.values():
        wait_for_client(scheduler.socket, pid, state="idle")  # their last holds have ended

    samples = scrape(url)
    status = scheduler_status(scheduler.socket)
    log = scheduler.log()
    assert samples.only("gemshare_grants_total", device=0) == \
        len(re.findall(r"\bgrant client \d+ \(pid \d+,", log)) >= 3
    assert samples.only("gemshare_drops_total", device=0, reason="quantum") > 0
    waits = len(re.findall(r"\bgrant client \d+ \(pid \d+, .*after waiting", log))
    assert samples.only("gemshare_lock_wait_seconds_count", device=0) == waits > 0
    assert waits == sum(client_of(status, pid)["waits"] for pid in pids.values())
    assert samples.value("gemshare_clients_connected") == 2
    assert samples.only("gemshare_holders", device=0) == 0
    assert samples.only("gemshare_queue_length", device=0) == 0
    for name, pid in pids.items():
        client = client_of(status, pid)
        held = samples.only("gemshare_lock_held_seconds_total", label=name)
        assert abs(held - client["hold_time_s"]) <= 0.002, (name, held, client)
        assert held > 0.5  # it ran 2 s of kernels in turns of 1 s
        allocated = samples.only("gemshare_allocated_bytes", label=name)
        assert allocated == SIZES[name] == client["allocated_bytes"]

    gpu.path("exit-a").touch()
    assert programs["a"].wait().returncode == 0
    wait_for(lambda: client_of(scheduler_status(scheduler.socket), pids["a"]) is None,
             "program a to leave the scheduler")
    samples = scrape(url)
    for name in ("gemshare_lock_held_seconds_total", "gemshare_allocated_bytes"):
        assert not samples.labelled(name, label="a"), name
        assert samples.labelled(name, label="b"), name
    assert samples.value("gemshare_clients_connected") == 1
    gpu.path("exit-b").touch()
    assert programs["b"].wait().returncode == 0
