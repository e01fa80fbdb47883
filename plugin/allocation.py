"""What a container given some slots gets: the library preloaded, the scheduler's socket, its GPUs.

Nothing here asks the scheduler anything: a pod must start while the scheduler is down or
restarting, and the library in it runs unscheduled until the scheduler answers (it fails open).
The scheduler's socket directory is mounted rather than the socket file, so that a scheduler
that restarts (and makes a new socket file) is reached by containers started before it. The
mounts are read-only: connecting to a Unix socket needs no write access to its file system.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from . import api
from .slots import parse_slot_id

CONTAINER_LIBRARY = "/usr/local/lib/gemshare/libnvs.so"
CONTAINER_SOCKET_DIR = "/var/run/gemshare"


class UnknownDevices(ValueError):
    """The kubelet named device IDs this plugin never advertised."""


@dataclass(frozen=True)
class Paths:
    library: str  # libnvs.so on the host
    scheduler_socket: str  # the scheduler's socket on the host

    @property
    def socket_dir(self) -> str:
        return str(PurePosixPath(self.scheduler_socket).parent)

    @property
    def container_socket(self) -> str:
        return str(PurePosixPath(CONTAINER_SOCKET_DIR) / PurePosixPath(self.scheduler_socket).name)


def gpus_of(device_ids, known: dict[str, int], slots: int) -> list[str]:
    """The GPU UUIDs the slots are on, each once, in the GPUs' index order; `known` is the
    index of each advertised GPU by UUID, each with `slots` slots. Raises UnknownDevices naming
    every ID that was not advertised."""
    uuids, unknown = set(), []
    for device_id in device_ids:
        parsed = parse_slot_id(device_id)
        if parsed is None or parsed[0] not in known or parsed[1] >= slots:
            unknown.append(device_id)
        else:
            uuids.add(parsed[0])
    if unknown:
        shown = ", ".join(repr(device_id[:80]) for device_id in unknown[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise UnknownDevices(f"unknown device IDs {shown}{more}: this plugin advertises "
                             f"GPU-UUID::SLOT, SLOT from 0 to {slots - 1}, for the GPUs "
                             f"{', '.join(known) or '(none found)'}")
    if not uuids:
        raise UnknownDevices("no device IDs in the request: ask for at least one slot")
    return sorted(uuids, key=lambda uuid: known[uuid])


def container_response(device_ids, known: dict[str, int], slots: int, paths: Paths):
    """The ContainerAllocateResponse for one container's slots (UnknownDevices when bad)."""
    uuids = gpus_of(device_ids, known, slots)
    return api.ContainerAllocateResponse(
        envs={"LD_PRELOAD": CONTAINER_LIBRARY,
              "GEMSHARE_SOCKET": paths.container_socket,
              "NVIDIA_VISIBLE_DEVICES": ",".join(uuids)},
        mounts=[api.Mount(container_path=CONTAINER_LIBRARY, host_path=paths.library,
                          read_only=True),
                api.Mount(container_path=CONTAINER_SOCKET_DIR, host_path=paths.socket_dir,
                          read_only=True)])
