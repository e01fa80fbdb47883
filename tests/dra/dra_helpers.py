"""What the DRA driver's tests share: the four fake GPUs, the node, and waiting for a condition."""

from __future__ import annotations

import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
FAKE_NVML_DIR = REPO / "tests" / "fake_nvml"
GIB = 1 << 30
NODE, NODE_UID = "node-a", "7c0e5a3b-1d2f-4e6a-9b8c-0d1e2f3a4b5c"
FOUR_GPUS = [{"name": "Fake H100", "uuid": f"GPU-{index}1111111-2222-3333-4444-555555555555",
              "total": total * GIB, "used": 0, "numa": index // 2,
              "pci_bus_id": f"00000000:{0x18 + index:02X}:00.0"}
             for index, total in enumerate((80, 80, 40, 24))]
WAIT_S = 15.0


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"waited {WAIT_S:g} s for {what}"
        time.sleep(0.02)
