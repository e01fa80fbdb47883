"""A container's pod and units asked of the node's daemons (nvs/kubernetes/node.py) over their
real gRPC APIs, against stand-ins on Unix sockets: the runtime's ContainerStatus, the kubelet's
pod-resources List and Get, and what happens when either is missing, slow or refuses."""

from __future__ import annotations

import sys
import time

import pytest
from node_standins import StandInKubelet, StandInRuntime, compute_units, memory_units

from gemshare_nvs.core.model.container import GpuUnits, NodeIdentity
from gemshare_nvs.kubernetes.allocation import units_by_gpu
from gemshare_nvs.kubernetes.cgroups import ContainerRef
from gemshare_nvs.kubernetes.grpc_calls import INSTALL, GrpcMissing
from gemshare_nvs.kubernetes.node import (
    DEFAULT_CRI_SOCKETS,
    DEFAULT_POD_RESOURCES_SOCKET,
    NodeLookup,
    chosen_sockets,
)

GIB = 1 << 30
GPU = "GPU-8f3c1d2e-0a1b-4c5d-9e8f-7a6b5c4d3e2f"
OTHER_GPU = "GPU-0a0a0a0a-0a1b-4c5d-9e8f-7a6b5c4d3e2f"
CONTAINER = "ab" * 32
REF = ContainerRef(CONTAINER, "uid-from-cgroup", "containerd")


@pytest.fixture
def node(short_tmp_dirs):
    """(runtime, kubelet factory, directory): a stand-in runtime knowing CONTAINER as ml/train-0
    container main; the kubelet made by the test, with what Get does."""
    directory = short_tmp_dirs()
    runtime = StandInRuntime(directory / "containerd.sock")
    runtime.add(CONTAINER, "ml", "train-0", "main", "uid-from-runtime")
    kubelets = []

    def kubelet(get: str = "served") -> StandInKubelet:
        kubelets.append(StandInKubelet(directory / f"kubelet-{len(kubelets)}.sock", get))
        return kubelets[-1]

    yield runtime, kubelet, directory
    for server in (runtime, *kubelets):
        server.stop()


def test_units_are_counted_by_gpu_from_their_ids_whatever_the_resource():
    ids = [*memory_units(GPU, 3), *compute_units(GPU, 30), *memory_units(OTHER_GPU, 2, 512),
           f"{GPU}::0", "nvidia.com/gpu-0", *memory_units(GPU, 1)]  # a slot, another's, a repeat
    assert units_by_gpu(ids) == (GpuUnits(OTHER_GPU, 2, GIB, 0),
                                 GpuUnits(GPU, 3, 3 * GIB, 30))
    assert units_by_gpu([f"{GPU}::3", "whatever"]) == ()


@pytest.mark.parametrize("get", ["served", "disabled", "unknown"])
def test_the_runtime_names_the_pod_and_the_kubelet_its_units(node, get):
    runtime, make_kubelet, _ = node
    kubelet = make_kubelet(get)
    kubelet.allocate("ml", "train-0", "main", "gemshare.io/gpu-memory", memory_units(GPU, 8))
    kubelet.allocate("ml", "train-0", "main", "gemshare.io/gpu-compute", compute_units(GPU, 30))
    kubelet.allocate("ml", "train-0", "sidecar", "gemshare.io/gpu-memory",
                     memory_units(GPU, 2, first=8))
    kubelet.allocate("ml", "other", "main", "gemshare.io/gpu-memory",
                     memory_units(GPU, 4, first=10))
    lookup = NodeLookup(str(runtime.path), str(kubelet.path))
    try:
        for _ in range(2):  # the second time a kubelet without Get is not asked for it again
            identity, problem = lookup.identify(REF)
            assert (identity, problem) == (NodeIdentity(
                CONTAINER, "train-0", "ml", "main", "uid-from-runtime",
                (GpuUnits(GPU, 8, 8 * GIB, 30),)), "")
    finally:
        lookup.close()
    # (a kubelet that knows no Get answers UNIMPLEMENTED before any handler of its runs)
    expected = {"served": ["Get", "Get"], "disabled": ["Get", "List", "List"],
                "unknown": ["List", "List"]}[get]
    assert kubelet.calls == expected
    assert runtime.calls == ["ContainerStatus"] * 2


def test_a_container_without_units_is_named_with_none(node):
    runtime, make_kubelet, _ = node
    kubelet = make_kubelet()
    kubelet.allocate("ml", "train-0", "main", "gemshare.io/gpu", [f"{GPU}::0"])
    lookup = NodeLookup(str(runtime.path), str(kubelet.path))
    identity, problem = lookup.identify(REF)
    lookup.close()
    assert (identity.pod, identity.gpus, problem) == ("train-0", (), "")


def test_a_container_the_runtime_does_not_know_has_no_identity(node):
    runtime, make_kubelet, _ = node
    lookup = NodeLookup(str(runtime.path), str(make_kubelet().path))
    identity, problem = lookup.identify(ContainerRef("cd" * 32, "uid", "containerd"))
    lookup.close()
    assert identity is None
    assert "did not name its pod" in problem and "NOT_FOUND" in problem


def test_a_container_without_pod_labels_is_no_kubelet_container(node):
    runtime, make_kubelet, _ = node
    runtime.containers["ef" * 32] = {"io.containerd.image": "busybox"}
    lookup = NodeLookup(str(runtime.path), "")
    identity, problem = lookup.identify(ContainerRef("ef" * 32, "uid", "containerd"))
    lookup.close()
    assert identity is None and "io.kubernetes.pod.name" in problem


def test_without_the_kubelet_the_identity_comes_and_says_what_is_missing(node):
    runtime, _, directory = node
    for socket in ("", str(directory / "no-kubelet.sock")):
        lookup = NodeLookup(str(runtime.path), socket)
        identity, problem = lookup.identify(REF)
        lookup.close()
        assert (identity.pod, identity.gpus) == ("train-0", ())
        assert identity.problem == problem
        assert ("no pod-resources socket" in problem) if not socket else \
            ("did not list its devices (UNAVAILABLE" in problem)


def test_a_runtime_that_hangs_is_given_up_within_the_deadline(node):
    runtime, _, _ = node
    runtime.hold.clear()
    lookup = NodeLookup(str(runtime.path), "", timeout_s=0.3)
    started = time.monotonic()
    identity, problem = lookup.identify(REF)
    waited = time.monotonic() - started
    runtime.hold.set()
    lookup.close()
    assert identity is None and "DEADLINE_EXCEEDED" in problem
    assert waited < 10  # only catches a lookup that waited for the runtime


def test_without_a_runtime_socket_nothing_is_asked():
    lookup = NodeLookup("", "")
    assert lookup.identify(REF) == (None, "no CRI socket to name its pod")


def test_the_sockets_default_to_those_that_exist_and_an_empty_one_is_none():
    present = {DEFAULT_CRI_SOCKETS[1], DEFAULT_POD_RESOURCES_SOCKET}
    assert chosen_sockets(None, None, present.__contains__) == (DEFAULT_CRI_SOCKETS[1],
                                                                 DEFAULT_POD_RESOURCES_SOCKET)
    assert chosen_sockets(None, None, lambda path: False) == ("", "")
    assert chosen_sockets("", "", present.__contains__) == ("", "")
    assert chosen_sockets("/run/k3s/containerd/containerd.sock", "/x.sock", lambda path: False) \
        == ("/run/k3s/containerd/containerd.sock", "/x.sock")


def test_without_grpc_a_socket_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "grpc", None)  # import grpc fails as if not installed
    with pytest.raises(GrpcMissing, match="pip install") as missing:
        NodeLookup("/run/containerd/containerd.sock", "")
    assert INSTALL in str(missing.value)
