"""The CDI device IDs the DRA driver gives a claim's containers, written and read in one place.

The driver (gemshare-dra-plugin, dra/) names each device it prepares for a claim after the
claim's terms on that GPU; the kubelet lists the IDs for each container that uses the claim
(pod-resources `dynamic_resources`), and the scheduler reads the terms back from them, as it
reads the device plugin's unit IDs (device_units.py): no table shared between the two, and an ID
means the same after either restarts. The pod cannot change them: the kubelet lists what the
driver answered at NodePrepareResources.

An ID is `gemshare.io/claim=<GPU-UUID>.m<bytes>.c<compute units>.<claim UID>`, within what CDI
allows in a device name (letters, digits, `-`, `_`, `.`, `:`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DRIVER = "gpu.gemshare.io"  # the DRA driver's name, its DeviceClass's and its attributes' domain
CDI_KIND = "gemshare.io/claim"
COMPUTE_UNITS_PER_GPU = 100
_NAME = re.compile(r"(?P<gpu>GPU-[0-9A-Za-z-]+)\.m(?P<memory>0|[1-9][0-9]{0,18})"
                   r"\.c(?P<compute>0|[1-9][0-9]{0,2})\.(?P<claim>[0-9A-Za-z-]{1,64})")


@dataclass(frozen=True)
class ClaimDevice:
    gpu_uuid: str
    memory_bytes: int  # 0: no memory limit
    compute_units: int  # 0 to 100
    claim_uid: str

    @property
    def name(self) -> str:
        """The device's name in the claim's CDI spec."""
        return f"{self.gpu_uuid}.m{self.memory_bytes}.c{self.compute_units}.{self.claim_uid}"

    @property
    def cdi_id(self) -> str:
        return f"{CDI_KIND}={self.name}"


def parse_cdi_id(cdi_id: str) -> ClaimDevice | None:
    """The device an ID names, or None for anything ClaimDevice does not write."""
    kind, _, name = cdi_id.partition("=")
    match = _NAME.fullmatch(name) if kind == CDI_KIND else None
    if match is None or int(match["compute"]) > COMPUTE_UNITS_PER_GPU:
        return None
    return ClaimDevice(match["gpu"], int(match["memory"]), int(match["compute"]), match["claim"])
