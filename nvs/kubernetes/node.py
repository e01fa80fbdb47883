"""A container's identity and units, asked of the node: the container runtime names its pod,
namespace and name (cri.py), the kubelet lists what it was allocated, by device plugins and by
our DRA driver's claims (pod_resources.py); and what all the node's containers hold together.

Blocking, each call within a short deadline: lookups.py runs these off the event loop.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

from ..core.model.container import HeldUnits, NodeIdentity
from .allocation import held_by_gpu, units_by_gpu
from .cgroups import ContainerRef
from .cri import CriClient, NotFromKubelet
from .grpc_calls import NodeApiError
from .pod_resources import PodResourcesClient

# Where containerd and CRI-O listen, in the order tried when no --cri-socket is given.
DEFAULT_CRI_SOCKETS = ("/run/containerd/containerd.sock", "/var/run/crio/crio.sock")
DEFAULT_POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# Each call's deadline: a runtime or a kubelet answers such a question in milliseconds.
CALL_TIMEOUT_S = 1.0


def chosen_sockets(cri: str | None, pod_resources: str | None,
                   exists: Callable[[str], bool] = os.path.exists) -> tuple[str, str]:
    """The sockets to ask, "" for none: a path given is used as it is (a daemon may start
    later), "" turns the lookup off, and None takes the first default that exists now."""
    if cri is None:
        cri = next((path for path in DEFAULT_CRI_SOCKETS if exists(path)), "")
    if pod_resources is None:
        pod_resources = DEFAULT_POD_RESOURCES_SOCKET if exists(DEFAULT_POD_RESOURCES_SOCKET) else ""
    return cri, pod_resources


def is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


class NodeLookup:
    """Asks the runtime at `cri_socket` and the kubelet at `pod_resources_socket` ("": not at
    all). GrpcMissing when a socket is given and gRPC is not installed."""

    def __init__(self, cri_socket: str, pod_resources_socket: str,
                 timeout_s: float = CALL_TIMEOUT_S):
        self.cri = CriClient(cri_socket, timeout_s) if cri_socket else None
        self.pod_resources = PodResourcesClient(pod_resources_socket, timeout_s) \
            if pod_resources_socket else None

    def identify(self, ref: ContainerRef) -> tuple[NodeIdentity | None, str]:
        """The container's identity (None when the runtime cannot name its pod) and what could
        not be learnt ("" for nothing)."""
        if self.cri is None:
            return None, "no CRI socket to name its pod"
        try:
            labels = self.cri.container(ref.container_id)
        except (NodeApiError, NotFromKubelet) as error:
            return None, f"the runtime at {self.cri.path} did not name its pod ({error})"
        problem, gpus = "", ()
        if self.pod_resources is None:
            problem = "no pod-resources socket to learn its units"
        else:
            try:
                gpus = units_by_gpu(*self.pod_resources.allocated(
                    labels.namespace, labels.pod, labels.container))
            except NodeApiError as error:
                problem = f"the kubelet at {self.pod_resources.path} did not list its " \
                          f"devices ({error})"
        return NodeIdentity(ref.container_id, labels.pod, labels.namespace, labels.container,
                            labels.pod_uid or ref.pod_uid, gpus, problem), problem

    @property
    def lists_units(self) -> bool:
        """Whether it can say what the node's containers hold (held_units)."""
        return self.pod_resources is not None

    def held_units(self) -> tuple[tuple[HeldUnits, ...] | None, str]:
        """What all the node's containers hold of each GPU, and "" (or None and why the kubelet
        could not say)."""
        if self.pod_resources is None:
            return None, "no pod-resources socket to list the node's units"
        try:
            return held_by_gpu(self.pod_resources.every_container()), ""
        except NodeApiError as error:
            return None, f"the kubelet at {self.pod_resources.path} did not list the node's " \
                         f"containers ({error})"

    def missing(self) -> list[str]:
        """The sockets it was given that are not there now, in words (readiness)."""
        return [f"{what} socket {client.path} is missing" for what, client in (
            ("the container runtime's", self.cri),
            ("the kubelet's pod-resources", self.pod_resources))
            if client is not None and not is_socket(client.path)]

    def status(self) -> dict:
        """The sockets asked, for status."""
        return {"cri_socket": self.cri.path if self.cri else None,
                "pod_resources_socket": self.pod_resources.path if self.pod_resources else None,
                "node_identity_socket": None}

    def close(self) -> None:
        for client in (self.cri, self.pod_resources):
            if client is not None:
                client.close()
