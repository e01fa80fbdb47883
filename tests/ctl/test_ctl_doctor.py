"""`gemsharectl doctor` on the fake driver: what it says of a machine where a preloaded program is
shared, and of machines where something stops sharing (no scheduler, a library of the other
architecture or for a newer glibc, a driver that does not start, a program without the
library). Real processes throughout: the scheduler, the stand-in CUDA program, gemsharectl."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import pytest

from gemshare_nvs.service.mps import STARTING
from gemshare_nvs.version import version

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "libnvs"))
import libnvs_programs  # noqa: E402
from libnvs_programs import (BUILD, LIBNVS, NO_EARLY_RELEASE, FakeGpu,  # noqa: E402
                             wait_file, wait_for, wait_for_client)

OTHER_ARCHITECTURE = {"x86_64": "aarch64", "aarch64": "x86_64"}


@pytest.fixture(scope="module")
def built():
    libnvs_programs.make("lib", "fakecuda")


@pytest.fixture
def fake_gpu(built, tmp_path, scheduler_factory):
    """A scheduler and the simulated GPU bound to it."""
    scheduler = scheduler_factory()
    gpu = FakeGpu(tmp_path, scheduler.socket)
    yield gpu
    gpu.stop_all()


def doctor(ctl, gpu: FakeGpu, *args: str, env: dict | None = None):
    """gemsharectl doctor for the test's scheduler and library, run as a program on the fake
    driver would be (the fake libcuda and NVML on LD_LIBRARY_PATH); its lines by check name."""
    done = ctl("doctor", "--socket", str(gpu.socket), "--library", str(LIBNVS), *args,
               env={**gpu.env(preload=True), **(env or {})})
    lines = {}
    for line in done.stdout.splitlines():
        status, name, what = line.split(None, 2)
        lines.setdefault(name, []).append((status, what))
    return done, lines


def statuses(lines: dict) -> dict:
    return {name: {status for status, _ in found} for name, found in lines.items()}


def start_shared_program(gpu: FakeGpu, preload: bool = True):
    program = gpu.start(["init", "alloc", "buf", "8M", "launch", 100, "sync", "touch-file",
                         gpu.path("ready"), "wait-file", gpu.path("never")],
                        env=NO_EARLY_RELEASE, preload=preload)
    wait_file(gpu.path("ready"))
    return program


def test_a_preloaded_program_is_found_loaded_and_registered(ctl, fake_gpu):
    program = start_shared_program(fake_gpu)
    client = wait_for_client(fake_gpu.socket, program.pid, allocated_bytes=8 << 20)
    done, lines = doctor(ctl, fake_gpu, "--pid", str(program.pid))
    assert done.returncode == 0, done.stdout + done.stderr
    found = statuses(lines)
    for name in ("scheduler", "library", "driver", "gpus", "mps", "preload", "program",
                 "client"):
        assert found.get(name) == {"ok"}, done.stdout
    assert "GPU 0: gemshare fake GPU" in lines["gpus"][0][1]
    scheduler_line = lines["scheduler"][0][1]
    assert f"gemshare-scheduler {version()} answers on {fake_gpu.socket}" in scheduler_line
    assert "version" not in lines  # the scheduler is gemsharectl's own release
    assert f"has {LIBNVS} loaded" in lines["program"][0][1]
    assert f"is client {client['id']} of the scheduler" in lines["client"][0][1]
    assert "8 MiB allocated" in lines["client"][0][1]
    assert "LD_PRELOAD names" in lines["preload"][0][1]


def test_json_gives_the_same_checks_as_the_lines(ctl, fake_gpu):
    program = start_shared_program(fake_gpu)
    wait_for_client(fake_gpu.socket, program.pid)
    plain, lines = doctor(ctl, fake_gpu, "--pid", str(program.pid))
    done = ctl("doctor", "--json", "--socket", str(fake_gpu.socket), "--library", str(LIBNVS),
               "--pid", str(program.pid), env=fake_gpu.env(preload=True))
    assert done.returncode == plain.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    assert {c["name"]: {c["status"]} for c in report["checks"]} == statuses(lines)
    assert all(set(check) == {"name", "status", "what", "fix"} for check in report["checks"])


def test_no_scheduler_fails_and_says_how_to_start_one(ctl, built, tmp_path):
    gpu = FakeGpu(tmp_path, tmp_path / "none.sock")
    done, lines = doctor(ctl, gpu)
    assert done.returncode == 1
    (status, what), = lines["scheduler"]
    assert status == "fail"
    assert "does not exist" in what and "systemctl start gemshare-scheduler" in what
    assert "mps" not in lines  # only the scheduler could say whether it runs MPS
    report = json.loads(ctl("doctor", "--json", "--socket", str(gpu.socket),
                            env=gpu.env()).stdout)
    assert report["ok"] is False
    scheduler = next(c for c in report["checks"] if c["name"] == "scheduler")
    assert scheduler["status"] == "fail" and "start it" in scheduler["fix"]


def test_a_library_of_the_other_architecture_fails(ctl, fake_gpu):
    machine = platform.machine()
    if machine not in OTHER_ARCHITECTURE:
        pytest.skip(f"libnvs.so is built for x86_64 and aarch64; this machine is {machine}")
    other = OTHER_ARCHITECTURE[machine]
    libnvs_programs.make("libs")
    done, lines = doctor(ctl, fake_gpu, "--library", str(BUILD / other / "libnvs.so"))
    assert done.returncode == 1
    assert {name for name, found in statuses(lines).items() if "fail" in found} == {"library"}
    (_, what), = lines["library"]
    assert f"is built for {other}" in what and f"this machine is {machine}" in what
    assert f"build/{machine}/libnvs.so" in what


def test_a_library_needing_a_newer_glibc_fails(ctl, fake_gpu, tmp_path):
    # The same library asking for a version no glibc has: what a build for a newer glibc
    # (PORTABLE=0 on a new distribution) is on an old one.
    needy = tmp_path / "libnvs.so"
    data = LIBNVS.read_bytes()
    assert b"GLIBC_2.17\0" in data
    needy.write_bytes(data.replace(b"GLIBC_2.17\0", b"GLIBC_9.17\0"))
    done, lines = doctor(ctl, fake_gpu, "--library", str(needy))
    assert done.returncode == 1
    (status, what), = lines["library"]
    assert status == "fail" and "needs glibc 9.17" in what, done.stdout


def test_a_driver_that_does_not_start_fails(ctl, fake_gpu):
    done, lines = doctor(ctl, fake_gpu, env={"FAKECUDA_INIT_ERROR": "100"})
    assert done.returncode == 1
    (status, what), = lines["driver"]
    assert status == "fail" and "CUDA_ERROR_NO_DEVICE" in what


def test_a_program_without_the_library_fails(ctl, fake_gpu):
    program = start_shared_program(fake_gpu, preload=False)
    done, lines = doctor(ctl, fake_gpu, "--pid", str(program.pid))
    assert done.returncode == 1
    (status, what), = lines["program"]
    assert status == "fail" and "has no libnvs.so loaded" in what
    assert "client" not in lines  # a program without the library cannot have registered


def test_a_preload_naming_a_missing_file_fails(ctl, fake_gpu, tmp_path):
    missing = tmp_path / "gone" / "libnvs.so"
    done, lines = doctor(ctl, fake_gpu, env={"LD_PRELOAD": str(missing)})
    assert done.returncode == 1
    (status, what), = lines["preload"]
    assert status == "fail" and f"names {missing}, which does not exist" in what


def test_a_program_that_has_not_used_the_gpu_is_loaded_but_not_registered(ctl, fake_gpu):
    program = fake_gpu.start([], command=["/bin/sleep", "60"])  # the library, and no CUDA
    wait_for(lambda: "libnvs" in Path(f"/proc/{program.pid}/maps").read_text(),
             "the library in the program")
    done, lines = doctor(ctl, fake_gpu, "--pid", str(program.pid))
    assert done.returncode == 1
    assert lines["program"][0][0] == "ok"
    (status, what), = lines["client"]
    assert status == "fail" and "is not registered with the scheduler" in what
    assert "first reaches for the CUDA driver" in what


FAKE_MPS = Path(__file__).resolve().parents[1] / "fake_mps"


@pytest.mark.parametrize("daemon", [True, False], ids=["mps-running", "mps-missing"])
def test_mps_is_checked_where_the_scheduler_runs_it(ctl, built, tmp_path, scheduler_factory,
                                                    short_tmp_dirs, daemon):
    # Without the control program on its PATH the scheduler serves on and says why MPS is down.
    path = f"{FAKE_MPS}:/usr/bin:/bin" if daemon else "/usr/bin:/bin"
    scheduler = scheduler_factory(directory=short_tmp_dirs(), mps=True,
                                  env={"PATH": path, "FAKE_MPS_RECORD": str(tmp_path / "mps")})
    gpu = FakeGpu(tmp_path, scheduler.socket)

    def settled():
        mps = libnvs_programs.scheduler_status(scheduler.socket)["mps"]
        return mps["running"] if daemon else mps["problem"] not in (None, STARTING)

    wait_for(settled, "the scheduler to find MPS running" if daemon else "MPS to have failed")
    done, lines = doctor(ctl, gpu)
    (status, what), = lines["mps"]
    if daemon:
        assert status == "ok" and "the MPS control daemon answers" in what, done.stdout
    else:
        assert status == "fail" and "asked for, but the MPS control daemon does not run" in what
        assert "nvidia-cuda-mps-control" in what, what
        assert done.returncode == 1
