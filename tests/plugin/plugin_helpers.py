"""What the device plugin's tests share: the fake GPUs, the host paths given to the plugin, and
running it as a process."""

import json
import os
import subprocess
import time
from pathlib import Path

from gemshare_plugin.allocation import Paths

REPO = Path(__file__).resolve().parent.parent.parent
FAKE_NVML_DIR = REPO / "tests" / "fake_nvml"
GIB = 1 << 30
UUID_A = "GPU-11111111-2222-3333-4444-555555555555"
UUID_B = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
TWO_GPUS = [{"name": "Fake H100", "uuid": UUID_A, "total": 80 * GIB, "used": 0},
            {"name": "Fake H200", "uuid": UUID_B, "total": 141 * GIB, "used": 0}]
HOST_PATHS = Paths(library="/opt/gemshare/lib/libnvs.so",
                   scheduler_socket="/run/gemshare-test/scheduler.sock")
PROCESS_WAIT_S = 15.0


def plugin_environment(**extra) -> dict:
    """The environment of a plugin run as a process: the fake NVML with TWO_GPUS, no settings
    of ours from outside."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_NVML", "GEMSHARE_"))}
    env.update(PYTHONPATH=str(FAKE_NVML_DIR), FAKE_NVML_GPUS=json.dumps(TWO_GPUS), **extra)
    return env


def wait_for_text(path: Path, text: str, process: subprocess.Popen) -> None:
    """Until the plugin's log at `path` says `text`; fails if it exits first."""
    deadline = time.monotonic() + PROCESS_WAIT_S
    while text not in path.read_text():
        assert process.poll() is None, path.read_text()
        assert time.monotonic() < deadline, path.read_text()
        time.sleep(0.05)
