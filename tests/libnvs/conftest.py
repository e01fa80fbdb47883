"""Fixtures for the tests of libnvs.so on the fake driver (real processes throughout).

`fake_gpu` is a simulated GPU for the test with no scheduler on its socket; `gpu_with` starts a
real gemshare-scheduler (through `scheduler_factory` of tests/conftest.py) and returns the
simulated GPU bound to it, `gpu_with_nvml` one that reads the simulated GPU's NVML, and `gpu`
does so with default scheduler options. `scripted` binds the
simulated GPU to a scheduler stand-in the test drives message by message (scripted_scheduler.py).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import libnvs_programs
from libnvs_programs import TSAN_LIBNVS, FakeGpu
from scripted_scheduler import ScriptedScheduler


@pytest.fixture(scope="session")
def built():
    """libnvs.so, the fake driver and the stand-ins, built (incrementally) with make."""
    libnvs_programs.make("lib", "fakecuda")
    return libnvs_programs.BUILD


@pytest.fixture
def fake_gpu(built, tmp_path):
    """A simulated GPU whose socket has no scheduler behind it."""
    gpu = FakeGpu(tmp_path, tmp_path / "no-scheduler.sock")
    yield gpu
    gpu.stop_all()


@pytest.fixture
def gpu_with(built, tmp_path, scheduler_factory):
    """gpu_with(**scheduler_options) -> (FakeGpu, scheduler) sharing one socket."""
    gpus = []

    def start(device_mem: str = "64M", **options):
        scheduler = scheduler_factory(**options)
        gpu = FakeGpu(tmp_path, scheduler.socket, device_mem)
        gpus.append(gpu)
        return gpu, scheduler

    yield start
    for gpu in gpus:
        gpu.stop_all()


@pytest.fixture
def gpu_with_nvml(gpu_with, tmp_path):
    """`gpu_with` whose scheduler reads the fake GPU's NVML (build/fakecuda/libnvidia-ml.so.1)
    of the programs' shared device, which lists each process that made a context there with
    its own device memory, as a driver does, and takes the fake driver's managed memory for
    what a driver maps of it (FAKE_UVM_MAPPING)."""
    def start(device_mem: str = "64M", **options):
        env = {"LD_LIBRARY_PATH": str(libnvs_programs.FAKECUDA), "FAKECUDA_DEVICE_MEM": device_mem,
               "FAKECUDA_SHARED_DEVICE": str(tmp_path / "shared-device"),
               "GEMSHARE_UVM_MAPPING": libnvs_programs.FAKE_UVM_MAPPING}
        gpu, scheduler = gpu_with(device_mem, env=env, **options)
        assert "GPU information: from NVML" in scheduler.log(), scheduler.log()
        return gpu, scheduler

    return start


@pytest.fixture
def gpu(gpu_with):
    return gpu_with()[0]


@pytest.fixture
def scripted(built, tmp_path):
    """(FakeGpu, ScriptedScheduler) sharing a socket in a short directory of its own."""
    directory = Path(tempfile.mkdtemp(prefix="gs-", dir="/tmp"))
    scheduler = ScriptedScheduler(directory)
    gpu = FakeGpu(tmp_path, scheduler.socket)
    yield gpu, scheduler
    gpu.stop_all()
    scheduler.close()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def scripted_migrating(scripted):
    """`scripted` with moves by copy off: every move is the driver's migration, which the fake
    logs as prefetches (moves by copy: test_move_by_copy.py); and no prefetch of new memory, so
    that the prefetches logged are the moves (new memory: test_populate.py)."""
    scripted[0].base_env.update(GEMSHARE_MOVE_COPY="0", GEMSHARE_POPULATE="0")
    return scripted


@pytest.fixture
def gpu_with_migrating(gpu_with):
    """`gpu_with` with moves by copy off: programs of many GiB would otherwise make the fake
    stage that much real host memory, where migrations on the fake cost none. New memory is not
    prefetched either, so that the prefetches logged are the moves."""
    def start(device_mem: str = "64M", **options):
        gpu, scheduler = gpu_with(device_mem, **options)
        gpu.base_env.update(GEMSHARE_MOVE_COPY="0", GEMSHARE_POPULATE="0")
        return gpu, scheduler

    return start


@pytest.fixture
def restartable(scheduler_factory):
    """restartable(scheduler) starts a new scheduler on a stopped one's socket, stopped later."""
    started = []

    def restart(old, **options):
        new = type(old)(old.directory, **options)
        started.append(new)
        return new

    yield restart
    for scheduler in started:
        scheduler.stop()
    # scheduler_factory removes the directory after stopping its own schedulers.


def tsan_runtime() -> Path | None:
    """The shared ThreadSanitizer runtime of the compiler that builds libnvs."""
    found = subprocess.run(["cc", "-print-file-name=libtsan.so"], capture_output=True, text=True)
    path = Path(found.stdout.strip())
    return path.resolve() if found.returncode == 0 and path.is_absolute() and path.exists() \
        else None


@pytest.fixture(scope="module")
def tsan_preload(built):
    """LD_PRELOAD for libnvs.so built under ThreadSanitizer, or a skip where there is none."""
    runtime = tsan_runtime()
    if runtime is None:
        pytest.skip("no ThreadSanitizer runtime (libtsan) for this compiler")
    libnvs_programs.make("lib", SANITIZE="thread")
    # The runtime must come first: an uninstrumented program's pthread_create must reach it.
    return f"{runtime} {TSAN_LIBNVS}"
