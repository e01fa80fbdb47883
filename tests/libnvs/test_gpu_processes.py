"""The scheduler checks what clients say against NVML's list of the GPU's processes, with libnvs
and the real scheduler on the fake driver, whose NVML (build/fakecuda/libnvidia-ml.so.1) lists
each process that made a context on the device with its own device memory, as a driver does:

- a client with no GPU context that reports 4 TiB makes no idle program move or pin anything
  (before the check, three idle programs pinned 256 MiB each within a second), its report
  refused;
- a client with a context and a little managed memory that reports 4 TiB counts as what its
  process has mapped (the fake driver's managed memory shows in /proc/PID/maps as a driver's
  does), and moves nobody either, while the programs under libnvs are believed in full;
- a program that uses the GPU without libnvs is logged, counted and shown in status.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from libnvs_programs import scheduler_status, wait_file, wait_for
from metrics_scrape import metrics_url, scrape

LIAR = Path(__file__).with_name("lying_client.py")


@pytest.mark.parametrize("how", ["report", "context"],
                         ids=["without a context", "with a context and 64 MiB managed"])
def test_a_report_of_more_than_a_client_has_on_the_gpu_moves_no_idle_program(gpu_with_nvml, how):
    # Their 768 MiB and a context reserve fit in 2 GiB: none of them moves for the others.
    gpu, scheduler = gpu_with_nvml("2G", anti_thrash="auto")
    idle = [gpu.start(["init", "alloc", "buf", "256M", "launch", 1000, "sync",
                       "touch-file", gpu.path(f"ran-{i}"), "wait-file", gpu.path("done")])
            for i in range(3)]
    for i in range(3):
        wait_file(gpu.path(f"ran-{i}"))
    wait_for(lambda: all(client["state"] == "idle" and client["allocated_bytes"] == 256 << 20
                         for client in scheduler_status(scheduler.socket)["clients"])
             and len(scheduler_status(scheduler.socket)["clients"]) == 3, "three idle programs")
    pinned_before = gpu.log.read_text().count("host_register")
    liar = subprocess.Popen([sys.executable, str(LIAR), str(scheduler.socket), how,
                             str(4 << 40), str(64 << 20)], stdout=subprocess.PIPE, text=True,
                            env=gpu.env(preload=False))
    try:
        assert liar.stdout.readline().strip() == "reported"
        time.sleep(1.0)  # the finding's programs had pinned their memory by then
        assert gpu.log.read_text().count("host_register") == pinned_before, scheduler.log()
        assert "evict client" not in scheduler.log()
        status = scheduler_status(scheduler.socket)
        (lying,) = [client for client in status["clients"] if client["name"] == "liar"]
        if how == "report":
            assert "where NVML lists no process of its" in scheduler.log()
            assert lying["allocated_bytes"] == 0
            assert lying["memory_refused"] == {"0": "not_on_device"}
        else:
            wait_for(lambda: "the managed memory its process has mapped" in scheduler.log(),
                     "the refusal's line")
            # At most its 64 MiB, NVML's figure of its context and the margin.
            assert 64 << 20 < lying["allocated_bytes"] <= (64 << 20) + (512 << 20)
            assert lying["memory_refused"] == {"0": "above_mapped"}
        assert all(not client["memory_refused"] and client["allocated_bytes"] == 256 << 20
                   for client in status["clients"] if client["name"] != "liar"), status
    finally:
        liar.terminate()
        liar.wait()
        gpu.path("done").touch()
    for program in idle:
        assert program.wait().returncode == 0


def test_a_program_using_the_gpu_without_the_library_is_logged_counted_and_shown(gpu_with_nvml):
    gpu, scheduler = gpu_with_nvml("1G", metrics="127.0.0.1:0")
    scheduled = gpu.start(["init", "alloc", "buf", "64M", "launch", 1000, "sync",
                           "touch-file", gpu.path("scheduled"), "wait-file", gpu.path("done")])
    unscheduled = gpu.start(["init", "alloc", "buf", "128M", "touch-file", gpu.path("ready"),
                             "wait-file", gpu.path("done")], preload=False)
    try:
        wait_file(gpu.path("scheduled"))
        wait_file(gpu.path("ready"))
        line = f"unregistered GPU user: pid {unscheduled.pid} (standin"
        wait_for(lambda: line in scheduler.log(), "the unregistered program's line", timeout=20)
        assert f"pid {scheduled.pid} (" not in scheduler.log().split("unregistered GPU user")[1]
        status = scheduler_status(scheduler.socket)
        assert [(entry["pid"], entry["device"], entry["used_bytes"])
                for entry in status["unregistered"]] == [(unscheduled.pid, 0, 128 << 20)]
        shown = subprocess.run([sys.executable, "-m", "gemshare_ctl", "--socket",
                                str(scheduler.socket), "status"], capture_output=True,
                               text=True, timeout=30)
        assert f"Unregistered GPU user: pid {unscheduled.pid}" in shown.stdout, shown
        samples = scrape(metrics_url(scheduler))
        assert samples.only("gemshare_unregistered_gpu_processes", device="0") == 1
        assert samples.only("gemshare_unregistered_gpu_processes_seen_total", device="0") == 1
        assert scheduler.log().count("unregistered GPU user") == 1  # said once
    finally:
        gpu.path("done").touch()
    assert scheduled.wait().returncode == 0 and unscheduled.wait().returncode == 0
