"""gemshare-scheduler --mps runs NVIDIA's MPS control daemon: here the stand-in of
tests/fake_mps, which records how it was started and what it was told. The daemon comes up
beside serving (test_scheduler_mps_start.py holds that part), so a test that wants it running
waits for status to say so."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from gemshare_nvs import protocol as p
from gemshare_nvs.service.mps import STARTING

STAND_IN = Path(__file__).resolve().parents[1] / "fake_mps"
PROBE_WAIT_S = 20.0  # the scheduler asks every 5 s; restarts follow at once


def mps_env(record: Path, **extra) -> dict:
    return {"PATH": f"{STAND_IN}:{os.environ['PATH']}", "FAKE_MPS_RECORD": str(record),
            **extra}


def calls(record: Path) -> list[dict]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines()]


def status(scheduler) -> dict:
    with scheduler.connect() as conn:
        return conn.request({"op": "status"})["status"]


def wait_for(condition, timeout: float = PROBE_WAIT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s")


def daemon_pid(pipe: Path) -> int:
    return int((pipe / "stand-in-control.pid").read_text())


def running_mps(scheduler) -> dict:
    """The MPS part of status once the daemon answers."""
    return wait_for(lambda: (mps := status(scheduler)["mps"])["running"] and mps)


def test_mps_starts_the_control_daemon_beside_the_socket_and_quits_it_at_exit(
        scheduler_factory, short_tmp_dirs):
    directory = short_tmp_dirs()
    record = directory / "mps.jsonl"
    scheduler = scheduler_factory(directory=directory, mps=True, env=mps_env(record))
    pipe, log_dir = directory / "mps" / "pipe", directory / "mps" / "log"
    mps = running_mps(scheduler)
    (started,) = [c for c in calls(record) if c["event"] == "start"]
    assert started["argv"] == ["-d"]
    assert (started["pipe"], started["log"]) == (str(pipe), str(log_dir))
    assert oct(pipe.stat().st_mode & 0o777) == "0o755"
    assert mps == {"enabled": True, "running": True, "pipe_directory": str(pipe),
                   "log_directory": str(log_dir), "adopted": False, "restarts": 0,
                   "problem": None, "user": None, "clients": 0}
    pid = daemon_pid(pipe)
    assert scheduler.stop() == 0
    assert [c["command"] for c in calls(record) if c["event"] == "command"][-1] == "quit"
    with pytest.raises(ProcessLookupError):
        wait_for(lambda: os.kill(pid, 0), timeout=5)
    assert "MPS: told the control daemon" in scheduler.log()


def test_a_client_that_may_share_is_sent_the_pipe_directory_before_it_is_registered(
        scheduler_factory, short_tmp_dirs):
    directory = short_tmp_dirs()
    scheduler = scheduler_factory(directory=directory, mps=True, anti_thrash="auto",
                                  env=mps_env(directory / "mps.jsonl"))
    running_mps(scheduler)
    with scheduler.connect() as conn:
        conn.send(p.Register(0, 0, "infer"))
        (first, _), (second, _) = conn.recv(), conn.recv()
        assert first == p.Mps(0, 0, str(directory / "mps" / "pipe"))
        assert isinstance(second, p.Registered)
        (client,) = status(scheduler)["clients"]
        assert (client["mps"], client["mps_why"]) == (True, None)
        assert status(scheduler)["mps"]["user"] == os.getuid()


def test_a_rules_low_priority_goes_in_the_mps_frame_and_status_shows_it(scheduler_factory,
                                                                        short_tmp_dirs):
    directory = short_tmp_dirs()
    config = directory / "gemshare.toml"
    config.write_text('[[rule]]\nmatch = { label = "trainer" }\nmps_priority = "low"\n')
    scheduler = scheduler_factory(directory=directory, mps=True, anti_thrash="auto",
                                  env=mps_env(directory / "mps.jsonl"))
    running_mps(scheduler)
    pipe = str(directory / "mps" / "pipe")
    with scheduler.connect() as trainer, scheduler.connect() as other:
        trainer.send(p.Register(0, 0, "train", label="trainer"))
        assert trainer.recv()[0] == p.Mps(0, p.MpsPriority.LOW, pipe)
        other.send(p.Register(0, 0, "infer"))
        assert other.recv()[0] == p.Mps(0, p.MpsPriority.NORMAL, pipe)
        clients = {c["label"]: c for c in status(scheduler)["clients"]}
        assert (clients["trainer"]["mps_priority"],
                clients["trainer"]["terms_from"]["mps_priority"]) == \
            ("low", f"config rule 1 ({config}:1)")
        assert (clients[""]["mps_priority"], clients[""]["terms_from"]["mps_priority"]) == \
            ("normal", "default")
    assert "through MPS (low priority)" in scheduler.log()


def test_a_dead_control_daemon_is_started_again_and_said_so(scheduler_factory, short_tmp_dirs):
    directory = short_tmp_dirs()
    record = directory / "mps.jsonl"
    scheduler = scheduler_factory(directory=directory, mps=True, env=mps_env(record))
    pipe = directory / "mps" / "pipe"
    running_mps(scheduler)
    os.kill(daemon_pid(pipe), signal.SIGKILL)
    wait_for(lambda: len([c for c in calls(record) if c["event"] == "start"]) == 2)
    mps = wait_for(lambda: (s := status(scheduler)["mps"])["running"] and s)
    assert mps["restarts"] == 1
    assert "MPS: the control daemon at" in scheduler.log() and \
        "stopped answering (" in scheduler.log()


def test_an_adopted_daemon_is_used_and_left_running(scheduler_factory, short_tmp_dirs):
    directory = short_tmp_dirs()
    record, pipe = directory / "mps.jsonl", directory / "theirs"
    env = mps_env(record, CUDA_MPS_PIPE_DIRECTORY=str(pipe))
    subprocess.run([str(STAND_IN / "nvidia-cuda-mps-control"), "-d"], env={**os.environ, **env},
                   check=True, timeout=10)
    try:
        scheduler = scheduler_factory(directory=directory, mps_pipe_directory=pipe, env=env)
        mps = running_mps(scheduler)
        assert (mps["running"], mps["adopted"], mps["pipe_directory"]) == (True, True, str(pipe))
        assert scheduler.stop() == 0
        assert not any(c.get("command") == "quit" for c in calls(record))
        os.kill(daemon_pid(pipe), 0)  # still there: its owner stops it
    finally:
        os.kill(daemon_pid(pipe), signal.SIGTERM)


def test_without_the_control_program_the_scheduler_runs_and_says_why(scheduler_factory,
                                                                        short_tmp_dirs):
    directory = short_tmp_dirs()
    scheduler = scheduler_factory(directory=directory, mps=True, anti_thrash="auto",
                                  env={"PATH": "/usr/bin:/bin"})
    mps = wait_for(lambda: (mps := status(scheduler)["mps"])["problem"] != STARTING and mps)
    assert (mps["running"], mps["problem"]) == (False, "nvidia-cuda-mps-control is not on PATH")
    with scheduler.connect() as conn:
        conn.send(p.Register(0, 0, "infer"))
        assert isinstance(conn.recv()[0], p.Registered)  # no MPS frame: a plain context
        (client,) = status(scheduler)["clients"]
        assert client["mps_why"] == "the MPS control daemon is not running"
    # One line says it, and none says otherwise (no "starting it again" of what never ran).
    said = [line for line in scheduler.log().splitlines()
            if re.search(r" (INFO|WARNING) MPS: ", line)]
    assert len(said) == 1, said
    assert "cannot start the control daemon" in said[0] and "not on PATH" in said[0] and \
        "programs run as plain contexts until it answers" in said[0], said


def test_without_mps_status_says_it_is_off(scheduler):
    assert status(scheduler)["mps"] == {"enabled": False}
