"""What the device plugin's tests share: the fake GPUs and the host paths given to the plugin."""

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
