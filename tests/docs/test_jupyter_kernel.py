"""docs/jupyter.md's kernel spec and config file work: a real ipykernel kernel, started through
jupyter_client from the spec the page shows (its paths made this test's), runs a cell that
allocates memory and launches a kernel on the fake driver, and the scheduler lists it under the
label notebook, with its memory and the terms the page's rule gives it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import ipykernel  # noqa: F401  the kernel's, from the test extra: missing, no kernel could start
import jupyter_client
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "libnvs"))
import libnvs_programs  # noqa: E402
from libnvs_programs import FAKECUDA, LIBNVS, wait_for_client  # noqa: E402


REPO = Path(__file__).resolve().parents[2]
PAGE = (REPO / "docs" / "jupyter.md").read_text()
START_TIMEOUT_S = 120.0  # an interpreter importing IPython on a loaded two-CPU machine
CELL_TIMEOUT_S = 60.0
ALLOCATED = 64 << 20

# The cell: what a notebook's framework does first, through the driver API itself.
CELL = f"""
import ctypes, os
cuda = ctypes.CDLL("libcuda.so.1")
def check(result, what):
    assert result == 0, f"{{what}} failed: CUDA error {{result}}"
check(cuda.cuInit(0), "cuInit")
device, context = ctypes.c_int(), ctypes.c_void_p()
check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
pointer = ctypes.c_uint64()
check(cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t({ALLOCATED})), "cuMemAlloc")
module, function = ctypes.c_void_p(), ctypes.c_void_p()
check(cuda.cuModuleLoadData(ctypes.byref(module), b"kernels"), "cuModuleLoadData")
check(cuda.cuModuleGetFunction(ctypes.byref(function), module, b"sleep"), "cuModuleGetFunction")
check(cuda.cuLaunchKernel(function, 1000, 1, 1, 1, 1, 1, 0, None, None, None), "cuLaunchKernel")
check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
print("pid", os.getpid())
"""


def page_block(language: str) -> str:
    """The page's first code block in `language`."""
    found = re.search(rf"^```{language}\n(.*?)^```", PAGE, re.M | re.S)
    assert found, f"docs/jupyter.md has no {language} block"
    return found[1]


def kernel_spec(socket: Path) -> dict:
    """The page's kernel.json, with this test's interpreter, library and socket, and the fake
    driver where a real one would be."""
    spec = json.loads(page_block("json"))
    assert spec["env"]["GEMSHARE_LABEL"] == "notebook"
    assert Path(spec["env"]["LD_PRELOAD"]).name == "libnvs.so"
    assert spec["argv"][1:] == ["-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec["argv"][0] = sys.executable
    spec["env"].update(LD_PRELOAD=str(LIBNVS), GEMSHARE_SOCKET=str(socket),
                       LD_LIBRARY_PATH=str(FAKECUDA))
    return spec


@pytest.fixture
def scheduler(scheduler_factory, short_tmp_dirs):
    """A scheduler reading the page's config file."""
    libnvs_programs.make("lib", "fakecuda")
    directory = short_tmp_dirs()
    (directory / "gemshare.toml").write_text(page_block("toml"))
    return scheduler_factory(directory=directory)


@pytest.fixture
def kernel(scheduler, tmp_path, monkeypatch):
    """A kernel started from the page's spec, and a client of it; shut down at the end."""
    spec_dir = tmp_path / "jupyter" / "kernels" / "python3-gemshare"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps(kernel_spec(scheduler.socket)))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    for name in ("LD_PRELOAD", "GEMSHARE_LABEL", "GEMSHARE_SOCKET"):
        monkeypatch.delenv(name, raising=False)
    manager = jupyter_client.KernelManager(kernel_name="python3-gemshare")
    manager.start_kernel()
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=START_TIMEOUT_S)
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def run_cell(client, code: str) -> str:
    out = []

    def keep(message):
        if message["msg_type"] == "stream":
            out.append(message["content"]["text"])
        elif message["msg_type"] == "error":
            out.append("\n".join(message["content"]["traceback"]))

    reply = client.execute_interactive(code, timeout=CELL_TIMEOUT_S, output_hook=keep)
    assert reply["content"]["status"] == "ok", "".join(out)
    return "".join(out)


def gemsharectl(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "gemshare_ctl", *args], capture_output=True,
                          text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)


def test_a_kernel_from_the_spec_is_a_client_labelled_notebook(scheduler, kernel):
    pid = int(re.search(r"pid (\d+)", run_cell(kernel, CELL))[1])
    wait_for_client(scheduler.socket, pid, allocated_bytes=ALLOCATED)
    done = gemsharectl("status", "--json", "--socket", str(scheduler.socket))
    assert done.returncode == 0, done.stderr
    (client,) = [c for c in json.loads(done.stdout)["clients"] if c["pid"] == pid]
    assert client["label"] == "notebook"
    assert client["allocated_bytes"] == ALLOCATED
    assert client["hold_time_s"] > 0  # the launch took the GPU's lock
    # The page's rule for label notebook gave it its weight.
    assert client["weight"] == 2 and client["terms_from"]["weight"].startswith("config rule 1")
    table = gemsharectl("status", "--socket", str(scheduler.socket))
    row = next(line for line in table.stdout.splitlines() if f" {pid} " in line)
    assert "notebook" in row and "64.0 MiB" in row, table.stdout
