"""gemshare-scheduler --mps with NVIDIA's real MPS control daemon on a real GPU: programs that
fit together become clients of its server, hold the GPU together and compute what they would
alone, a rule's low priority included; memory still moves when they do not fit; the daemon is
gone when the scheduler stops. Skipped where the machine has no nvidia-cuda-mps-control."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest
from test_gpu_libnvs import clients_while_running, moved_bytes, needs_torch, status

needs_mps = pytest.mark.skipif(shutil.which("nvidia-cuda-mps-control") is None,
                               reason="needs nvidia-cuda-mps-control on PATH")


def ask(pipe: str, command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["nvidia-cuda-mps-control"], input=command + "\n", capture_output=True,
                          text=True, timeout=30,
                          env={**os.environ, "CUDA_MPS_PIPE_DIRECTORY": pipe})


def daemon_answers(pipe: str) -> bool:
    return ask(pipe, "get_server_list").returncode == 0


def answering(scheduler) -> str:
    """The pipe directory of the scheduler's MPS control daemon, once it answers: it comes up
    beside serving, and a program that registers before runs as a plain context."""
    deadline = time.monotonic() + 60
    while not (mps := status(scheduler.socket)["mps"])["running"]:
        assert time.monotonic() < deadline, scheduler.log()
        time.sleep(0.1)
    return mps["pipe_directory"]


def mps_clients(pipe: str) -> set[int]:
    """The pids the control daemon at `pipe` lists as clients of its servers."""
    return {int(pid) for server in ask(pipe, "get_server_list").stdout.split()
            for pid in ask(pipe, f"get_client_list {server}").stdout.split() if pid.isdigit()}


@needs_torch
@needs_mps
def test_programs_that_fit_run_through_the_schedulers_mps_server(scheduler_factory,
                                                                 gpu_program):
    scheduler = scheduler_factory(tq=30, anti_thrash="auto", mps=True)
    pipe = answering(scheduler)
    programs = [gpu_program("gpu_work.py", 6, socket=scheduler.socket) for _ in range(2)]
    listed: set[int] = set()
    most_holding = 0
    for clients in clients_while_running(scheduler.socket, programs):
        most_holding = max(most_holding, sum(c["state"] == "holding" for c in clients))
        if len(listed) < 2:
            listed |= mps_clients(pipe) & {p.pid for p in programs}
    results = [program.finish() for program in programs]
    assert listed == {p.pid for p in programs}, scheduler.log()
    assert most_holding == 2, scheduler.log()
    for result, log in results:
        assert result["chunks"] > 0
        assert "runs through NVIDIA MPS" in log
    assert scheduler.stop() == 0
    deadline = time.monotonic() + 15
    while daemon_answers(pipe):  # it quits once its servers have no clients
        assert time.monotonic() < deadline, f"the control daemon at {pipe} outlived the scheduler"
        time.sleep(0.2)


@needs_torch
@needs_mps
def test_a_program_at_low_priority_is_an_mps_client_of_the_real_driver(scheduler_factory,
                                                                       short_tmp_dirs,
                                                                       gpu_program):
    directory = short_tmp_dirs()
    (directory / "gemshare.toml").write_text(
        '[[rule]]\nmatch = { label = "trainer" }\nmps_priority = "low"\n')
    scheduler = scheduler_factory(directory=directory, tq=30, anti_thrash="auto", mps=True)
    pipe = answering(scheduler)
    trainer = gpu_program("gpu_work.py", 4, socket=scheduler.socket, GEMSHARE_LABEL="trainer")
    listed: set[int] = set()
    for clients in clients_while_running(scheduler.socket, [trainer]):
        if not listed:
            listed = mps_clients(pipe) & {trainer.pid}
        if clients and clients[0]["mps"]:
            assert (clients[0]["mps_priority"], clients[0]["pid"]) == ("low", trainer.pid)
    result, log = trainer.finish()
    assert listed == {trainer.pid}, scheduler.log()
    assert result["chunks"] > 0
    assert "below-normal priority" in log
    assert "through MPS (low priority)" in scheduler.log()


@needs_torch
@needs_mps
def test_mps_clients_that_do_not_fit_take_turns_and_move_their_memory(scheduler_factory,
                                                                      gpu_program):
    # As test_gpu_libnvs's eviction test, through MPS: 2.5 GiB each under a 4 GiB capacity.
    scheduler = scheduler_factory(tq=2, anti_thrash="auto", capacity_mib=4096, mps=True)
    answering(scheduler)
    programs = [gpu_program("memory_turns.py", 2.5, 10, socket=scheduler.socket)
                for _ in range(2)]
    for program in programs:
        program.finish()  # every pass found its data intact
    log = scheduler.log()
    assert log.count("through MPS") >= 2, log
    out = [size for program in programs for size in moved_bytes(log, program.pid, "host")
           if size > 0]
    assert out and "to the host" in log, log
