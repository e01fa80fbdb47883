"""The CDI specs (Container Device Interface) the DRA driver writes, one file per prepared claim:
what the container runtime adds to every container that uses the claim.

Each of the claim's devices gives the container its GPU (the device nodes that exist on the
host, and NVIDIA_VISIBLE_DEVICES for the NVIDIA container runtime, which brings the driver's
libraries), libnvs.so, the scheduler's socket directory, and /etc/ld.so.preload naming the
library: the dynamic loader reads that file in every process, whatever the environment, so a
pod that sets its own LD_PRELOAD (or clears it with `env -i`) still runs under the library.

The spec also keeps what NodePrepareResources answered for the claim, so that a claim prepared
before a restart of the driver (or of the kubelet) is answered the same without the API server.
Files are written whole and renamed into place: the runtime never reads half a spec.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from gemshare_nvs.kubernetes.claim_devices import CDI_KIND, ClaimDevice

CDI_VERSION = "0.6.0"  # the first with annotations
CONTAINER_LIBRARY = "/usr/local/lib/gemshare/libnvs.so"
CONTAINER_SOCKET_DIR = "/var/run/gemshare"
CONTAINER_PRELOAD = "/etc/ld.so.preload"
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
PREPARED = "gemshare.io/prepared"  # the spec's annotation: the devices NodePrepareResources gave


@dataclass(frozen=True)
class Prepared:
    """One device as NodePrepareResources answers it."""
    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True)
class HostPaths:
    library: str  # libnvs.so on the host
    scheduler_socket: str  # the scheduler's socket on the host
    preload: str  # the file that becomes the container's /etc/ld.so.preload
    dev: str = "/dev"  # where the GPUs' device nodes are seen from here (the host's /dev)


def _bind(host: str, container: str) -> dict:
    return {"hostPath": host, "containerPath": container,
            "options": ["ro", "nosuid", "nodev", "bind"]}


def container_edits(device: ClaimDevice, minor: int | None, paths: HostPaths) -> dict:
    socket = Path(paths.scheduler_socket)
    nodes = [f"nvidia{minor}"] if minor is not None else []
    nodes += CONTROL_NODES
    return {
        "env": [f"GEMSHARE_SOCKET={CONTAINER_SOCKET_DIR}/{socket.name}",
                f"NVIDIA_VISIBLE_DEVICES={device.gpu_uuid}"],
        "deviceNodes": [{"path": f"/dev/{node}"} for node in nodes
                        if os.path.exists(os.path.join(paths.dev, node))],
        "mounts": [_bind(paths.library, CONTAINER_LIBRARY),
                   _bind(str(socket.parent), CONTAINER_SOCKET_DIR),
                   _bind(paths.preload, CONTAINER_PRELOAD)],
    }


def write_preload(path: str) -> None:
    """The file mounted as containers' /etc/ld.so.preload: the library's path in them."""
    _write(Path(path), f"{CONTAINER_LIBRARY}\n")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)


class CdiSpecs:
    """The specs in `directory`, one per claim UID."""

    def __init__(self, directory: str):
        self.directory = Path(directory)

    def path(self, claim_uid: str) -> Path:
        vendor, kind = CDI_KIND.split("/")
        return self.directory / f"{vendor}-{kind}_{claim_uid}.json"

    def write(self, claim: str, claim_uid: str, devices: list[tuple[ClaimDevice, dict]],
              prepared: list[Prepared]) -> None:
        """`devices`: each device with its container edits; `claim` namespace/name."""
        spec = {"cdiVersion": CDI_VERSION, "kind": CDI_KIND,
                "annotations": {"gemshare.io/claim": claim,
                                PREPARED: json.dumps([asdict(one) for one in prepared])},
                "devices": [{"name": device.name, "containerEdits": edits}
                            for device, edits in devices]}
        _write(self.path(claim_uid), json.dumps(spec, indent=1) + "\n")

    def prepared(self, claim_uid: str) -> list[Prepared] | None:
        """What the claim was prepared as, None when it has no spec here (or one we cannot
        read, which is then written anew)."""
        try:
            spec = json.loads(self.path(claim_uid).read_text())
            return [Prepared(tuple(one["request_names"]), one["pool_name"], one["device_name"],
                             tuple(one["cdi_device_ids"]), one.get("share_id"))
                    for one in json.loads(spec["annotations"][PREPARED])]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def remove(self, claim_uid: str) -> None:
        self.path(claim_uid).unlink(missing_ok=True)
