"""Real-GPU tests: skipped wherever no NVIDIA GPU and PyTorch are present (as in CI)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"
BUILD = Path(os.environ.get("GEMSHARE_BUILD_DIR", REPO / "build"))
RUN_TIMEOUT = 300


def gpu_present() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


def pytest_collection_modifyitems(config, items):
    if gpu_present():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run on the device machine)")
    for item in items:
        if Path(item.fspath).is_relative_to(Path(__file__).parent):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def libnvs() -> Path:
    library = BUILD / "libnvs.so"
    if not library.exists():
        subprocess.run(["make", "-C", str(REPO), "lib", f"BUILD={BUILD}"], check=True)
    return library


class GpuProgram(subprocess.Popen):
    def finish(self) -> tuple[dict, str]:
        """Wait for the program; the JSON line it printed last, and its stderr (libnvs's log)."""
        out, err = self.communicate(timeout=RUN_TIMEOUT)
        assert self.returncode == 0, f"exit {self.returncode}\nstdout:\n{out}\nstderr:\n{err}"
        return json.loads(out.strip().splitlines()[-1]), err

    def result(self) -> dict:
        return self.finish()[0]


@pytest.fixture(scope="session")
def cudart_12() -> Path:
    """A CUDA 12 runtime: GEMSHARE_TEST_CUDART_12, or the nvidia-cuda-runtime-cu12 wheel's."""
    candidates = [Path(os.environ["GEMSHARE_TEST_CUDART_12"])] \
        if "GEMSHARE_TEST_CUDART_12" in os.environ else \
        [Path(entry) / "nvidia/cuda_runtime/lib/libcudart.so.12" for entry in sys.path if entry]
    found = next((path for path in candidates if path.is_file()), None)
    if found is None:
        pytest.skip("needs a CUDA 12 runtime (pip install nvidia-cuda-runtime-cu12)")
    return found


@pytest.fixture
def gpu_program(libnvs):
    """Start a program from programs/ (under libnvs.so unless preload=False)."""

    def start(name, *args, socket=None, preload=True, launcher=(), **env):
        """`launcher`: arguments for Python before the program's path (`-m torch.distributed.run
        ...`); `name` may also be a path outside programs/."""
        search_path = os.pathsep.join(filter(None, [str(PROGRAMS), os.environ.get("PYTHONPATH")]))
        environment = dict(os.environ, PYTHONPATH=search_path, PYTHONUNBUFFERED="1",
                           **{k: str(v) for k, v in env.items()})
        if preload:
            environment["LD_PRELOAD"] = str(libnvs)
        if socket is not None:
            environment["GEMSHARE_SOCKET"] = str(socket)
        return GpuProgram([sys.executable, *launcher, str(PROGRAMS / name), *map(str, args)],
                          env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)

    return start

