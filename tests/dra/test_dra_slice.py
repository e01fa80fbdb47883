"""The node's ResourceSlice as the driver puts it on the (stand-in) API server: one device per
GPU, each with its own capacity, so that the kube-scheduler's allocator can never give a claim a
GPU that cannot hold it; kept current as GPUs come and go and as the API server comes back."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
from dra_helpers import FOUR_GPUS, GIB, NODE, NODE_UID, wait_until

from gemshare_dra.api_server import ApiServer
from gemshare_dra.driver import Driver
from gemshare_dra.inventory import GpuInfo, GpuInventory, Inventory
from gemshare_dra.resource_slice import Capacity, binary_quantity, resource_slice

KUBERNETES_VERSIONS = ("1.34.0", "1.37.0")


def test_four_gpus_are_four_devices_each_with_its_own_capacity(dra_node):
    published = dra_node.slice()
    spec = published["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]["name"]) == \
        ("gpu.gemshare.io", NODE, NODE)
    assert spec["pool"]["resourceSliceCount"] == 1
    assert published["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": NODE_UID, "controller": True}]
    devices = spec["devices"]
    assert [device["attributes"]["uuid"]["string"] for device in devices] == \
        [gpu["uuid"] for gpu in FOUR_GPUS]
    assert [device["capacity"]["memory"]["value"] for device in devices] == \
        ["80Gi", "80Gi", "40Gi", "24Gi"]
    for device, gpu in zip(devices, FOUR_GPUS):
        assert device["allowMultipleAllocations"] is True
        assert device["capacity"]["compute"]["value"] == "100"
        assert device["capacity"]["memory"]["requestPolicy"] == {
            "default": "1Gi", "validRange": {"min": "1Gi", "max": device["capacity"]["memory"]
                                             ["value"], "step": "1Gi"}}
        assert device["capacity"]["compute"]["requestPolicy"]["validRange"]["step"] == "1"
        attributes = device["attributes"]
        assert attributes["productName"] == {"string": "Fake H100"}
        assert attributes["driverVersion"] == {"string": "550.54.15"}
        assert attributes["cudaVersion"] == {"version": "12.4.0"}
        assert attributes["numaNode"] == {"int": gpu["numa"]}
        assert attributes["pciBusID"] == {"string": gpu["pci_bus_id"].lower()}
        assert device["name"] == "gpu-" + gpu["uuid"][4:]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_published_slice_is_valid_for_kubernetes(dra_node, version):
    published = dict(dra_node.slice())
    published["metadata"] = {key: value for key, value in published["metadata"].items()
                             if key != "resourceVersion"}
    kubernetes_validate.validate(published, version, strict=True)


def test_a_gpu_that_goes_away_leaves_the_slice_with_a_new_generation(dra_node, monkeypatch):
    first = dra_node.slice()["spec"]["pool"]["generation"]
    # GPU 3 falls off the bus: NVML cannot read it, so it is no longer healthy.
    monkeypatch.setenv("FAKE_NVML_FAIL_AT", "3")
    wait_until(lambda: len(dra_node.slice()["spec"]["devices"]) == 3, "a slice of three GPUs")
    assert dra_node.slice()["spec"]["pool"]["generation"] == first + 1
    puts = len(dra_node.api_server.puts)
    monkeypatch.delenv("FAKE_NVML_FAIL_AT")
    wait_until(lambda: len(dra_node.slice()["spec"]["devices"]) == 4, "the GPU back")
    assert dra_node.slice()["spec"]["pool"]["generation"] == first + 2
    # An unchanged node is not put again.
    wait_until(lambda: len(dra_node.api_server.requests) > 10 + len(dra_node.api_server.puts),
               "a few more looks at the slice")
    assert len(dra_node.api_server.puts) == puts + 1


def test_an_api_server_that_comes_back_gets_the_slice_again(dra_node):
    server = dra_node.api_server
    server.available.clear()
    wait_until(lambda: not dra_node.driver.published.is_set(), "the driver to see it gone")
    server.slices.clear()  # it came back without the slice (a new etcd, say)
    server.available.set()
    wait_until(lambda: server.slices, "the slice put again")
    assert len(dra_node.slice()["spec"]["devices"]) == 4


def test_an_api_server_without_consumable_capacity_is_told_and_not_put_again(
        fake_nvml, api_server, short_tmp_dirs, caplog):
    class NoSockets:
        def ensure(self):
            pass

    api_server.drops = ("allowMultipleAllocations", "requestPolicy")
    api = ApiServer(str(api_server.kubeconfig(short_tmp_dirs() / "kubeconfig")))
    driver = Driver(NODE, api, Capacity(GIB), NoSockets(), GpuInventory(fake_nvml))
    for _ in range(3):
        assert driver.turn()
    assert len(api_server.puts) == 1
    (kept,) = api_server.slices.values()
    assert "allowMultipleAllocations" not in kept["spec"]["devices"][0]
    said = [r.getMessage() for r in caplog.records if "consumable capacity" in r.getMessage()]
    assert len(said) == 1 and "DRAConsumableCapacity" in said[0]


def test_overcommit_publishes_more_memory_in_whole_units():
    gpu = GpuInfo(0, "GPU-01234567-89ab-cdef-0123-456789abcdef", "Fake", 80 * GIB)
    body = resource_slice("n", Inventory((gpu,)), Capacity(GIB, 1.5), 1)
    assert body["spec"]["devices"][0]["capacity"]["memory"]["value"] == "120Gi"
    small = resource_slice("n", Inventory((gpu,)), Capacity(3 * GIB, 1.0), 1)
    assert small["spec"]["devices"][0]["capacity"]["memory"]["value"] == "78Gi"  # 26 units of 3 GiB


def test_quantities_are_in_the_form_the_api_server_writes_back():
    assert [binary_quantity(n) for n in (GIB, 80 * GIB, 1536 << 20, 1 << 40, 1000)] == \
        ["1Gi", "80Gi", "1536Mi", "1Ti", "1000"]


def test_a_node_without_gpus_publishes_an_empty_slice_that_is_valid():
    body = resource_slice(NODE, Inventory(), Capacity(GIB), 1)
    assert body["spec"]["devices"] == []
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(json.loads(json.dumps(body)), version, strict=True)
