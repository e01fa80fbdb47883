"""libnvs.so with a scheduler that runs MPS (--mps, with the stand-in control daemon of
tests/fake_mps): the program's driver starts with the MPS variables the scheduler gave, or
without them; programs through MPS still hold the lock together only when they fit. And with a
scheduler stand-in (scripted_scheduler.py): what libnvs makes of MPS frames a scheduler should
never send."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import libnvs_fakelog as fakelog
import pytest
from libnvs_programs import client_of, run_pair_in_auto, scheduler_status, wait_file, wait_for

from gemshare_nvs import protocol as p

STAND_IN = Path(__file__).resolve().parents[1] / "fake_mps"
NOBODY = 65534


def mps_options(directory: Path, **options) -> dict:
    return {"directory": directory, "mps": True,
            "env": {"PATH": f"{STAND_IN}:{os.environ['PATH']}"}, **options}


@pytest.fixture
def gpu_with_mps(gpu_with):
    """gpu_with for a scheduler with --mps, returning once its control daemon answers: it comes
    up beside serving, and a program that registers before runs as a plain context."""
    def start(**options):
        gpu, scheduler = gpu_with(**options)
        wait_for(lambda: scheduler_status(scheduler.socket)["mps"]["running"],
                 "the MPS control daemon to answer")
        return gpu, scheduler
    return start


def init_event(gpu, pid: int) -> fakelog.Event:
    (event,) = fakelog.named(gpu.events(), "init", pid=pid)
    return event


def test_a_program_that_may_share_starts_its_driver_through_the_scheduler_mps(
        gpu_with_mps, short_tmp_dirs):
    directory = short_tmp_dirs()
    gpu, scheduler = gpu_with_mps(**mps_options(directory, anti_thrash="auto"))
    result = gpu.run(["init"])
    assert result.returncode == 0, result.describe()
    event = init_event(gpu, result.pid)
    assert (event["mps_pipe"], event["mps_share"]) == (str(directory / "mps" / "pipe"), "-")
    assert any("runs through NVIDIA MPS" in line for line in result.gemshare_lines())
    assert "through MPS" in scheduler.log()


def run_labelled(gpu_with_mps, directory: Path, rules: str, *labels: str) -> dict:
    """Runs `init` once per label under a scheduler with these config rules: each run's result
    and its cuInit event, by label."""
    (directory / "gemshare.toml").write_text(rules)
    gpu, _ = gpu_with_mps(**mps_options(directory, anti_thrash="auto"))
    results = [gpu.run(["init"], env={"GEMSHARE_LABEL": label}) for label in labels]
    return {label: (result, init_event(gpu, result.pid))
            for label, result in zip(labels, results)}


def test_rules_give_an_sm_share_or_keep_a_program_out(gpu_with_mps, short_tmp_dirs):
    runs = run_labelled(gpu_with_mps, short_tmp_dirs(),
                        '[[rule]]\nmatch = { label = "infer" }\nsm_share = 30\n\n'
                        '[[rule]]\nmatch = { label = "train" }\nmps = false\n', "infer", "train")
    (_, infer), (train, kept_out) = runs["infer"], runs["train"]
    assert infer["mps_share"] == "30"
    assert kept_out["mps_pipe"] == "-"
    assert not any("MPS" in line for line in train.gemshare_lines())


def test_a_rules_low_priority_reaches_the_driver_only_through_mps(gpu_with_mps,
                                                                 short_tmp_dirs):
    directory = short_tmp_dirs()
    runs = run_labelled(gpu_with_mps, directory,
                        '[[rule]]\nmatch = { label = "trainer" }\nmps_priority = "low"\n\n'
                        '[[rule]]\nmatch = { label = "apart" }\nmps = false\n'
                        'mps_priority = "low"\n', "trainer", "notebook", "apart")
    pipe = str(directory / "mps" / "pipe")
    seen = {label: (event["mps_pipe"], event["mps_priority"]) for label, (_, event) in runs.items()}
    assert seen == {"trainer": (pipe, "1"), "notebook": (pipe, "-"), "apart": ("-", "-")}
    assert any("below-normal priority" in line for line in runs["trainer"][0].gemshare_lines())
    assert not any("priority" in line for line in runs["notebook"][0].gemshare_lines())


def test_a_normal_priority_leaves_the_programs_own_alone(scripted):
    gpu, scheduler = scripted
    scheduler.mps = p.Mps(0, p.MpsPriority.NORMAL, "/run/theirs/mps")
    result = gpu.run(["init"], env={"CUDA_MPS_CLIENT_PRIORITY": "1"})
    assert result.returncode == 0, result.describe()
    event = init_event(gpu, result.pid)
    assert (event["mps_pipe"], event["mps_priority"]) == ("/run/theirs/mps", "1")


def test_an_mps_frame_with_an_unknown_priority_is_malformed_and_runs_a_plain_context(scripted):
    gpu, scheduler = scripted
    scheduler.mps = p.Mps(30, 2, "/run/theirs/mps")
    result = gpu.run(["init"])
    assert result.returncode == 0, result.describe()
    event = init_event(gpu, result.pid)
    assert (event["mps_pipe"], event["mps_share"], event["mps_priority"]) == ("-", "-", "-")
    assert any("MPS frame is malformed" in line and "client priority 2" in line
               for line in result.gemshare_lines()), result.describe()


def test_its_owner_keeps_a_program_out_and_its_own_mps_settings_stand(gpu_with_mps, short_tmp_dirs):
    directory = short_tmp_dirs()
    gpu, scheduler = gpu_with_mps(**mps_options(directory, anti_thrash="auto"))
    program = gpu.start(["init", "touch-file", gpu.path("up"), "wait-file", gpu.path("end")],
                        env={"GEMSHARE_MPS": "0", "CUDA_MPS_PIPE_DIRECTORY": "/srv/theirs"})
    wait_file(gpu.path("up"))
    client = wait_for(lambda: client_of(scheduler_status(scheduler.socket), program.pid),
                      "the program to register")
    assert (client["mps"], client["mps_why"]) == (False, "its owner set GEMSHARE_MPS=0")
    gpu.path("end").touch()
    assert program.wait().returncode == 0
    assert init_event(gpu, program.pid)["mps_pipe"] == "/srv/theirs"


def test_mode_on_keeps_one_holder_at_a_time_and_nobody_goes_through_mps(gpu_with_mps,
                                                                         short_tmp_dirs):
    gpu, _ = gpu_with_mps(**mps_options(short_tmp_dirs(), anti_thrash="on"))
    result = gpu.run(["init"])
    assert init_event(gpu, result.pid)["mps_pipe"] == "-"


def test_a_program_of_another_user_runs_as_a_plain_context_beside_mps(gpu_with_mps, short_tmp_dirs):
    setpriv = shutil.which("setpriv")
    if os.getuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to start a program as uid 65534")
    directory = short_tmp_dirs()
    gpu, scheduler = gpu_with_mps(**mps_options(directory, anti_thrash="auto"))
    mine = gpu.start(["init", "touch-file", gpu.path("up"), "wait-file", gpu.path("end")])
    wait_file(gpu.path("up"))
    theirs = gpu.start([], command=[setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}",
                                    "--clear-groups", *gpu.command(["init", "sleep-ms", 500])])
    client = wait_for(lambda: client_of(scheduler_status(scheduler.socket), theirs.pid),
                      "the other user's program to register")
    assert client["mps"] is False
    assert client["mps_why"].startswith(f"programs of uid {os.getuid()} use the MPS server")
    assert theirs.wait().returncode == 0  # it never waited for the MPS server
    gpu.path("end").touch()
    assert mine.wait().returncode == 0
    assert client_of(scheduler_status(scheduler.socket), mine.pid) is None


def test_through_mps_programs_that_fit_run_at_once_and_those_that_do_not_take_turns(
        gpu_with_mps, short_tmp_dirs):
    for allocation, together in (("16M", True), ("40M", False)):
        gpu, scheduler, (a, b) = run_pair_in_auto(gpu_with_mps, allocation,
                                                  **mps_options(short_tmp_dirs()))
        events = gpu.events()
        assert all(init_event(gpu, r.pid)["mps_pipe"] != "-" for r in (a, b))
        runs_a = fakelog.exec_intervals(events, a.pid, {"kernel"})
        runs_b = fakelog.exec_intervals(events, b.pid, {"kernel"})
        assert bool(fakelog.overlapping(runs_a, runs_b)) is together, (allocation, scheduler.log())
