"""What a container given units of ours gets: the library preloaded, the scheduler's socket, its
GPUs, whichever of the three resources (or several) it asked for.

Nothing here asks the scheduler anything: a pod must start while the scheduler is down or
restarting, and the library in it runs unscheduled until the scheduler answers (it fails open).
The scheduler's socket directory is mounted rather than the socket file, so that a scheduler
that restarts (and makes a new socket file) is reached by containers started before it. The
mounts are read-only: connecting to a Unix socket needs no write access to its file system.

With MPS (the node's scheduler runs with --mps) a container also gets what an MPS client needs,
both read-write: the control daemon's pipe directory, at the same path as on the host, because
the library hands the driver the path the scheduler reports, which is the host's; clients open
the named pipes in it for writing, and which of them a program may open is left to the modes
the control daemon gives them, as on the host. And the host's /dev/shm, where the MPS server
keeps the memory it shares with its clients (`mps.shm.<uid>.<pid>`): the server is the control
daemon's child, so its /dev/shm is the scheduler's, and that is the host's one wherever the
scheduler runs, as a system service or in its pod with the host's IPC. A directory of MPS's own
mounted at /dev/shm in both would keep the host's out of containers, but a scheduler on the host
cannot give its servers one without taking the host's from programs that run on the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from .resources import Resource

CONTAINER_LIBRARY = "/usr/local/lib/gemshare/libnvs.so"
CONTAINER_SOCKET_DIR = "/var/run/gemshare"
SHARED_MEMORY_DIR = "/dev/shm"


class UnknownDevices(ValueError):
    """The kubelet named device IDs this plugin never advertised."""


@dataclass(frozen=True)
class Paths:
    library: str  # libnvs.so on the host
    scheduler_socket: str  # the scheduler's socket on the host
    mps_pipe_directory: str | None = None  # the MPS control daemon's, on the host; None: no MPS

    @property
    def socket_dir(self) -> str:
        return str(PurePosixPath(self.scheduler_socket).parent)

    @property
    def container_socket(self) -> str:
        return str(PurePosixPath(CONTAINER_SOCKET_DIR) / PurePosixPath(self.scheduler_socket).name)


def units_by_gpu(resource: Resource, device_ids, counts: dict[str, int],
                 indices: dict[str, int]) -> dict[str, int]:
    """How many of the units are on each GPU, by UUID in the GPUs' index order; `counts` is
    how many units each advertised GPU has, `indices` its index. Raises UnknownDevices naming
    every ID that was not advertised."""
    units: dict[str, int] = {}
    unknown = []
    for device_id in device_ids:
        parsed = resource.parse(device_id)
        if parsed is None or parsed[1] >= counts.get(parsed[0], 0):
            unknown.append(device_id)
        else:
            units[parsed[0]] = units.get(parsed[0], 0) + 1
    if unknown:
        shown = ", ".join(repr(device_id[:80]) for device_id in unknown[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise UnknownDevices(f"unknown device IDs {shown}{more}: this plugin advertises "
                             f"{resource.name} as {resource.id_shape}, {_numbering(counts)}")
    if not units:
        raise UnknownDevices(f"no device IDs in the request: ask for at least one of "
                             f"{resource.name}")
    return {uuid: units[uuid] for uuid in sorted(units, key=lambda uuid: indices[uuid])}


def _numbering(counts: dict[str, int]) -> str:
    """How the advertised units are numbered, for a refusal."""
    if not counts:
        return "for the GPUs (none found)"
    if len(set(counts.values())) == 1:
        (count,) = set(counts.values())
        return f"numbered from 0 to {count - 1}, for the GPUs {', '.join(counts)}"
    return "numbered from 0 on each GPU, of which " + ", ".join(
        f"{uuid} has {count}" for uuid, count in counts.items())


def container_response(uuids, paths: Paths):
    """The ContainerAllocateResponse for one container given units of the GPUs `uuids`.

    The same for every resource: when a container has several of ours, the kubelet merges their
    answers, keeping the first of each variable and of each mount's container path, and logs an
    error where a later one differs. Theirs differ only where their GPUs do."""
    # Imported here: the paths above are the command's help too, which needs no protobuf.
    from . import api

    mounts = [api.Mount(container_path=CONTAINER_LIBRARY, host_path=paths.library,
                        read_only=True),
              api.Mount(container_path=CONTAINER_SOCKET_DIR, host_path=paths.socket_dir,
                        read_only=True)]
    if paths.mps_pipe_directory is not None:
        # No CUDA_MPS_* variables: the scheduler decides per program whether it goes through MPS,
        # and the library sets them when it does.
        mounts += [api.Mount(container_path=paths.mps_pipe_directory,
                             host_path=paths.mps_pipe_directory, read_only=False),
                   api.Mount(container_path=SHARED_MEMORY_DIR, host_path=SHARED_MEMORY_DIR,
                             read_only=False)]
    return api.ContainerAllocateResponse(
        envs={"LD_PRELOAD": CONTAINER_LIBRARY,
              "GEMSHARE_SOCKET": paths.container_socket,
              "NVIDIA_VISIBLE_DEVICES": ",".join(uuids)},
        mounts=mounts)
