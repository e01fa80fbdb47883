"""A container's budget from its DRA claims: the CDI devices our driver prepared, as the kubelet's
pod-resources API lists them for the container (`dynamic_resources`), become its memory and
compute units on their GPU; another driver's claims, and IDs we never write, count for nothing."""

from __future__ import annotations

import pytest
from node_standins import StandInKubelet, StandInRuntime, memory_units

from gemshare_nvs.core.model.container import GpuUnits, NodeIdentity
from gemshare_nvs.kubernetes.allocation import units_by_gpu
from gemshare_nvs.kubernetes.cgroups import ContainerRef
from gemshare_nvs.kubernetes.claim_devices import DRIVER, ClaimDevice, parse_cdi_id
from gemshare_nvs.kubernetes.node import NodeLookup

GIB = 1 << 30
GPU = "GPU-8f3c1d2e-0a1b-4c5d-9e8f-7a6b5c4d3e2f"
OTHER_GPU = "GPU-0a0a0a0a-0a1b-4c5d-9e8f-7a6b5c4d3e2f"
CLAIM = "4a1f6c9e-2b3d-4e5f-8a9b-0c1d2e3f4a5b"
CONTAINER = "cd" * 32


def test_a_claim_device_id_reads_back_as_written():
    device = ClaimDevice(GPU, 8 * GIB, 30, CLAIM)
    assert device.cdi_id == f"gemshare.io/claim={GPU}.m{8 * GIB}.c30.{CLAIM}"
    assert parse_cdi_id(device.cdi_id) == device


@pytest.mark.parametrize("cdi_id", [
    f"nvidia.com/gpu={GPU}.m1.c30.{CLAIM}",  # another vendor's kind
    f"gemshare.io/claim={GPU}.m1.c101.{CLAIM}",  # past the whole GPU
    f"gemshare.io/claim={GPU}.m01.c3.{CLAIM}",  # not as we write numbers
    f"gemshare.io/claim={GPU}.m1.c3",  # no claim
    "gemshare.io/claim=", "", "gemshare.io/claim=GPU-x.m1.c3.y.z"])
def test_anything_else_is_no_claim_device(cdi_id):
    assert parse_cdi_id(cdi_id) is None


def test_claims_add_up_per_gpu_with_device_plugin_units():
    claims = [ClaimDevice(GPU, 8 * GIB, 30, CLAIM).cdi_id,
              ClaimDevice(GPU, 2 * GIB, 80, "second").cdi_id,  # compute stops at the GPU
              ClaimDevice(OTHER_GPU, 0, 10, CLAIM).cdi_id,
              ClaimDevice(GPU, 8 * GIB, 30, CLAIM).cdi_id]  # listed twice: once
    assert units_by_gpu(memory_units(OTHER_GPU, 1), claims) == (
        GpuUnits(OTHER_GPU, 1, GIB, 10), GpuUnits(GPU, 0, 10 * GIB, 100))


def test_the_kubelet_lists_a_containers_claims_and_they_are_its_budget(short_tmp_dirs):
    directory = short_tmp_dirs()
    runtime = StandInRuntime(directory / "containerd.sock")
    kubelet = StandInKubelet(directory / "kubelet.sock")
    runtime.add(CONTAINER, "ml", "infer-0", "main", "pod-uid")
    ours = ClaimDevice(GPU, 8 * GIB, 30, CLAIM).cdi_id
    kubelet.prepare_claim("ml", "infer-0", "main", "gpu-share", DRIVER, "node-a", "gpu-2", [ours])
    # Another driver's device, even one whose CDI ID looks like ours, is not a budget of ours.
    kubelet.prepare_claim("ml", "infer-0", "main", "nic", "nic.example.com", "node-a", "nic-0",
                          [ClaimDevice(OTHER_GPU, GIB, 50, "x").cdi_id])
    kubelet.prepare_claim("ml", "infer-0", "sidecar", "gpu-share", DRIVER, "node-a", "gpu-2",
                          [ClaimDevice(GPU, GIB, 10, "y").cdi_id])
    lookup = NodeLookup(str(runtime.path), str(kubelet.path))
    try:
        assert lookup.identify(ContainerRef(CONTAINER, "pod-uid", "containerd")) == (
            NodeIdentity(CONTAINER, "infer-0", "ml", "main", "pod-uid",
                         (GpuUnits(GPU, 0, 8 * GIB, 30),)), "")
    finally:
        lookup.close()
        runtime.stop()
        kubelet.stop()
