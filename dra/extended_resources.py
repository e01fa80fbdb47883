"""How a pod that asks for `gemshare.io/gpu-memory` and `gemshare.io/gpu-compute` (extended
resources, as for the device plugin) is served on a cluster with this driver, decided from the
API server's version: said once in the log at start.

Kubernetes maps an extended resource to a DeviceClass (`spec.extendedResourceName`, KEP-5004:
alpha in 1.34, beta and on by default in 1.36), but to whole devices: a pod asking
`gpu-memory: 8` would be given eight GPUs. Asking for capacity through the mapping (KEP-6406)
is alpha in 1.38, behind a feature gate that is off by default. Until a release serves that by
default the DeviceClasses map nothing, and the device plugin serves those resources, on the
nodes that run it in place of this driver (label gemshare-device-plugin=true).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .api_server import ApiError

DRA_GA = 34  # resource.k8s.io/v1
WHOLE_DEVICE_MAPPING = 36  # KEP-5004 beta, on by default
CAPACITY_MAPPING_ALPHA = 38  # KEP-6406 alpha, off by default
BY_THE_DEVICE_PLUGIN = ("pods asking gemshare.io/gpu-memory and gemshare.io/gpu-compute are "
                        "served by the device plugin, on the nodes labelled "
                        "gemshare-device-plugin=true; on this driver's nodes a pod asks by "
                        "claim (DeviceClass gpu.gemshare.io)")


@dataclass(frozen=True)
class ServerVersion:
    major: int
    minor: int
    text: str  # gitVersion, as the server says it: v1.36.2-gke.100

    @classmethod
    def from_reply(cls, reply: dict) -> ServerVersion:
        """From /version's reply; ValueError when it names no 1.x release. A provider's
        minor may carry a suffix ("36+")."""
        text = str(reply.get("gitVersion", ""))
        major = re.match(r"\d+", str(reply.get("major", "")))
        minor = re.match(r"\d+", str(reply.get("minor", "")))
        if major is None or minor is None:  # then gitVersion must say: v1.36.2
            found = re.match(r"v?(\d+)\.(\d+)", text)
            if found is None:
                raise ValueError(f"the API server's /version names no release ({reply!r:.200})")
            return cls(int(found[1]), int(found[2]), text)
        return cls(int(major[0]), int(minor[0]), text or f"v{major[0]}.{minor[0]}")


def how_served(version: ServerVersion | None, unread_why: str = "") -> str:
    """One line: which path this cluster's pods asking the extended resources take, and why."""
    if version is None:
        return (f"the API server's version could not be read ({unread_why}); mapping "
                f"extended resources to claims is left off: {BY_THE_DEVICE_PLUGIN}")
    release = f"Kubernetes {version.major}.{version.minor} ({version.text})"
    if version.major != 1 or version.minor < DRA_GA:
        why = (f"{release} serves no resource.k8s.io/v1 (GA from 1.{DRA_GA}), so this driver's "
               "slices and claims cannot work here")
    elif version.minor < WHOLE_DEVICE_MAPPING:
        why = (f"{release} maps no extended resource to devices by default (KEP-5004, beta from "
               f"1.{WHOLE_DEVICE_MAPPING})")
    elif version.minor < CAPACITY_MAPPING_ALPHA:
        why = (f"{release} maps an extended resource to whole devices only (KEP-5004): "
               "gpu-memory: 8 would take eight GPUs, so the DeviceClasses map none")
    else:
        why = (f"{release}: asking for a device's capacity through an extended resource "
               f"(KEP-6406) is alpha from 1.{CAPACITY_MAPPING_ALPHA}, off by default, so the "
               "DeviceClasses map none")
    return f"{why}: {BY_THE_DEVICE_PLUGIN}"


def served_here(api) -> str:
    """how_served for the API server `api` (api_server.ApiServer) answers for."""
    try:
        return how_served(ServerVersion.from_reply(api.version()))
    except (ApiError, ValueError) as error:
        return how_served(None, str(error))
