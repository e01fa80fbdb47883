"""Which Kubernetes container a process is in, from its cgroup (/proc/PID/cgroup).

The kubelet puts each pod in a cgroup named by the pod's UID, and the runtime puts each container
in one named by the container's ID (64 hex digits) below it. The names depend on the cgroup
driver, not on the cgroup version, so one pattern reads both v1 (a line per hierarchy) and v2
(one line, `0::`):

- cgroupfs: `/kubepods/burstable/pod<uid>/<id>` (containerd), `.../pod<uid>/crio-<id>` (CRI-O);
  a Guaranteed pod has no QoS level: `/kubepods/pod<uid>/<id>`;
- systemd: `/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid>.slice/`
  `cri-containerd-<id>.scope` (or `crio-<id>.scope`), the UID's dashes written as underscores.

Anything may come before `kubepods` (a --cgroup-root, a node inside a container), and a process
may sit in a cgroup of its own below its container's. A scheduler in a cgroup namespace of its
own (cgroup v2) sees the others' paths from its own cgroup, `kubepods` hidden above it:
`/../../pod<uid>/<id>` from a container of another pod of its QoS level. CRI-O's monitor (`crio-conmon-<id>`) is no
container. The scheduler sees the node's pids only with hostPID.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
CONTAINER_ID_DIGITS = 64
# /proc/PID/cgroup of a process in a container is a few lines; more is not a cgroup file.
MAX_CGROUP_BYTES = 64 << 10

_POD = re.compile(r"^(?:[a-z]+-)*pod([0-9a-fA-F][0-9a-fA-F_-]*)(?:\.slice)?$")
_CONTAINER = re.compile(r"^(?:(cri-containerd|crio|docker)-)?([0-9a-f]{64})(?:\.scope)?$")
RUNTIMES = {"cri-containerd": "containerd", "crio": "cri-o", "docker": "docker", None: ""}


@dataclass(frozen=True)
class ContainerRef:
    """A container as its cgroup names it."""
    container_id: str
    pod_uid: str  # as the API server writes it: dashes, not underscores
    runtime: str  # "containerd", "cri-o" or "docker" when the name says; "" for cgroupfs


def container_in(cgroup_path: str) -> ContainerRef | None:
    """The container a cgroup path is in (a container's own, or one below it), else None."""
    parts = cgroup_path.split("/")
    if not any("kubepods" in part or part == ".." for part in parts):
        return None
    for at, part in enumerate(parts):
        pod = _POD.match(part)
        if pod is None:
            continue
        for below in parts[at + 1:]:
            found = _CONTAINER.match(below)
            if found is not None:
                return ContainerRef(found[2], pod[1].replace("_", "-"), RUNTIMES[found[1]])
        return None
    return None


def container_of(pid: int, proc: Path = PROC) -> ContainerRef | None:
    """The container process `pid` is in, read from `proc`/PID/cgroup; None for a process in
    no Kubernetes container, one gone, or one whose file cannot be read."""
    if pid <= 0:  # SO_PEERCRED's pid of a peer in another pid namespace
        return None
    try:
        with open(proc / str(pid) / "cgroup", "rb") as file:
            text = file.read(MAX_CGROUP_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) == 3:
            found = container_in(fields[2])
            if found is not None:
                return found
    return None
