"""What the tests of the scheduler on a Kubernetes node share: the stand-in runtime and kubelet
on sockets, a /proc of the test's whose cgroup files place each program, and raw protocol
clients connected from processes of their own (so that each has its pid)."""

from __future__ import annotations

import pytest
from node_standins import (
    StandInKubelet,
    StandInRuntime,
    cgroup_file,
    compute_units,
    container_path,
    memory_units,
    put_in_container,
)
from trio_peer import Peer

from gemshare_nvs import protocol as p

GIB = 1 << 30
GPU = "GPU-8f3c1d2e-0a1b-4c5d-9e8f-7a6b5c4d3e2f"
TRAINER = "a1" * 32
NOTEBOOK = "b2" * 32
DEADLINE = 30.0  # only catches hangs
HOST = "host"  # where `program` puts a process in no pod: a user's session, as on any host
HOST_CGROUP = "/user.slice/user-65534.slice/session-3.scope"


class Node:
    """The stand-in daemons and /proc of one test, and its scheduler's settings for them.
    `runtime` False: no runtime serves on its socket until start_runtime()."""

    def __init__(self, directory, runtime: bool = True):
        self.proc = directory / "proc"
        self.runtime_path = directory / "crio.sock"
        self.runtime = StandInRuntime(self.runtime_path) if runtime else None
        self.kubelet = StandInKubelet(directory / "kubelet.sock")
        self._containers: list[tuple] = []

    def settings(self, **more) -> dict:
        return {"cri_socket": str(self.runtime_path),
                "pod_resources_socket": str(self.kubelet.path), "proc": self.proc, **more}

    def start_runtime(self) -> None:
        self.runtime = StandInRuntime(self.runtime_path)
        for container in self._containers:
            self.runtime.add(*container)

    def container(self, container_id: str, namespace: str, pod: str, name: str,
                  memory_gib: int = 0, compute: int = 0, first_unit: int = 0,
                  known: bool = True) -> None:
        """A container of the kubelet's; `known` False: not (yet) to the runtime."""
        self._containers.append((container_id, namespace, pod, name))
        if known and self.runtime is not None:
            self.runtime.add(container_id, namespace, pod, name)
        units = memory_units(GPU, memory_gib, first=first_unit) + \
            compute_units(GPU, compute, first=first_unit)
        self.kubelet.allocate(namespace, pod, name, "gemshare.io/gpu-memory", units)

    def place(self, pid: int, container_id: str, version: int = 2) -> None:
        """Put process `pid` in a container, or on the host (HOST)."""
        path = HOST_CGROUP if container_id == HOST else container_path(
            "systemd", "cri-o", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", container_id)
        put_in_container(self.proc, pid, cgroup_file(version, path))

    def stop(self) -> None:
        if self.runtime is not None:
            self.runtime.stop()
        self.kubelet.stop()


@pytest.fixture
def node(short_tmp_dirs):
    made = Node(short_tmp_dirs())
    yield made
    made.stop()


async def program(running, node: Node, container_id: str | None, *, says=("", ""),
                  flags: int = 0, name: str = "python", label: str = "") -> tuple[Peer, list]:
    """A program in `container_id` (HOST: on the host; None: no cgroup file at all) that
    registers saying it is pod `says` (namespace, pod) with `label`; what it got up to
    REGISTERED."""
    peer, pid = await Peer.connect_as_another_process(running.socket)
    if container_id is not None:
        node.place(pid, container_id)
    await peer.send(p.Register(0, flags, name, says[0], says[1], label))
    got = [await peer.recv(DEADLINE)]
    while not isinstance(got[-1], p.Registered):
        got.append(await peer.recv(DEADLINE))
    return peer, got


async def status_of(running) -> dict:
    control = await Peer.connect(running.socket)
    reply = await control.control({"op": "status"})
    await control.aclose()
    return reply["status"]


async def next_limits(peer: Peer) -> p.Limits:
    while not isinstance(message := await peer.recv(DEADLINE), p.Limits):
        pass
    return message
