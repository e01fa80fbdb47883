"""The kubelet's side of the driver, through a stand-in kubelet over real gRPC: registration,
then NodePrepareResources for a claim the (stand-in) API server has allocated, which writes the
CDI spec its containers get and answers with CDI devices carrying its terms; unpreparing removes
it; both idempotent, in v1 and v1beta1, across restarts of the API server and of the kubelet."""

from __future__ import annotations

import json

import pytest
from dra_helpers import FOUR_GPUS, GIB, NODE, wait_until
from standin_api_server import allocated_claim

from gemshare_dra.inventory import GpuInfo
from gemshare_dra.resource_slice import device_name
from gemshare_nvs.kubernetes.claim_devices import parse_cdi_id

THIRD = FOUR_GPUS[2]
THIRD_DEVICE = device_name(GpuInfo(2, THIRD["uuid"], "", 0))
CLAIM = ("ml", "5e2a9c1d-7b3f-4d6e-8a9b-1c2d3e4f5a6b", "infer-0-gpu")


def add_claim(node, claim=CLAIM, device=THIRD_DEVICE, consumed=None, **more):
    namespace, uid, name = claim
    node.api_server.add_claim(allocated_claim(
        namespace, name, uid, NODE, device,
        {"memory": "8Gi", "compute": "30"} if consumed is None else consumed, **more))


def spec_of(node, uid: str) -> dict:
    return json.loads((node.cdi_dir / f"gemshare.io-claim_{uid}.json").read_text())


def test_registration_names_the_driver_its_socket_and_both_versions(dra_node):
    info = dra_node.kubelet.register()
    assert (info.type, info.name) == ("DRAPlugin", "gpu.gemshare.io")
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert info.endpoint == str(dra_node.directory / "plugins" / "gpu.gemshare.io" / "dra.sock")
    wait_until(dra_node.driver.services.registered.is_set, "the driver to hear it")


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_a_claim_of_8_gib_and_30_units_on_the_third_gpu_is_prepared(dra_node, version):
    add_claim(dra_node, share_id="a1b2c3")
    dra_node.kubelet.register(version)
    answer = dra_node.kubelet.prepare(CLAIM)[CLAIM[1]]
    assert answer.error == ""
    (device,) = answer.devices
    assert (list(device.request_names), device.pool_name, device.device_name) == \
        (["gpu"], NODE, THIRD_DEVICE)
    if version == "v1":
        assert device.share_id == "a1b2c3"
    (cdi_id,) = device.cdi_device_ids
    terms = parse_cdi_id(cdi_id)
    assert (terms.gpu_uuid, terms.memory_bytes, terms.compute_units, terms.claim_uid) == \
        (THIRD["uuid"], 8 * GIB, 30, CLAIM[1])
    spec = spec_of(dra_node, CLAIM[1])
    assert spec["kind"] == "gemshare.io/claim" and spec["cdiVersion"] == "0.6.0"
    (cdi_device,) = spec["devices"]
    assert f"gemshare.io/claim={cdi_device['name']}" == cdi_id
    edits = cdi_device["containerEdits"]
    assert f"NVIDIA_VISIBLE_DEVICES={THIRD['uuid']}" in edits["env"]
    assert "GEMSHARE_SOCKET=/var/run/gemshare/scheduler.sock" in edits["env"]
    mounts = {mount["containerPath"]: mount["hostPath"] for mount in edits["mounts"]}
    assert mounts == {"/usr/local/lib/gemshare/libnvs.so": "/opt/gemshare/lib/libnvs.so",
                      "/var/run/gemshare": str(dra_node.directory / "run"),
                      "/etc/ld.so.preload": dra_node.paths.preload}
    assert open(dra_node.paths.preload).read() == "/usr/local/lib/gemshare/libnvs.so\n"
    assert all("ro" in mount["options"] for mount in edits["mounts"])


def test_device_nodes_are_those_the_host_has(dra_node):
    dev = dra_node.directory / "dev"
    dev.mkdir()
    for name in ("nvidia2", "nvidiactl", "nvidia-uvm"):  # no nvidia-uvm-tools on this host
        (dev / name).touch()
    add_claim(dra_node)
    dra_node.kubelet.register()
    assert dra_node.kubelet.prepare(CLAIM)[CLAIM[1]].error == ""
    nodes = spec_of(dra_node, CLAIM[1])["devices"][0]["containerEdits"]["deviceNodes"]
    assert nodes == [{"path": "/dev/nvidia2"}, {"path": "/dev/nvidiactl"},
                     {"path": "/dev/nvidia-uvm"}]


def test_preparing_again_answers_the_same_without_the_api_server(dra_node):
    add_claim(dra_node)
    dra_node.kubelet.register()
    first = dra_node.kubelet.prepare(CLAIM)[CLAIM[1]]
    dra_node.api_server.available.clear()  # restarting
    again = dra_node.kubelet.prepare(CLAIM)[CLAIM[1]]
    assert again == first and again.error == ""


def test_unpreparing_removes_the_spec_and_twice_is_no_error(dra_node):
    add_claim(dra_node)
    dra_node.kubelet.register()
    dra_node.kubelet.prepare(CLAIM)
    path = dra_node.cdi_dir / f"gemshare.io-claim_{CLAIM[1]}.json"
    assert path.exists()
    assert dra_node.kubelet.unprepare(CLAIM) == {CLAIM[1]: ""}
    assert not path.exists()
    assert dra_node.kubelet.unprepare(CLAIM) == {CLAIM[1]: ""}


def test_a_claim_the_api_server_cannot_give_now_fails_alone_and_later_succeeds(dra_node):
    other = ("ml", "0b5a7c3e-1111-2222-3333-444455556666", "other")
    add_claim(dra_node, other, consumed={"memory": "2Gi", "compute": "10"})
    dra_node.kubelet.register()
    answers = dra_node.kubelet.prepare(CLAIM, other)  # CLAIM is not on the server yet
    assert "ResourceClaim ml/infer-0-gpu: 404" in answers[CLAIM[1]].error
    assert answers[other[1]].error == "" and answers[other[1]].devices
    dra_node.api_server.available.clear()
    assert "not reached" in dra_node.kubelet.prepare(CLAIM)[CLAIM[1]].error or \
        "503" in dra_node.kubelet.prepare(CLAIM)[CLAIM[1]].error
    add_claim(dra_node)
    dra_node.api_server.available.set()
    assert dra_node.kubelet.prepare(CLAIM)[CLAIM[1]].error == ""


@pytest.mark.parametrize("change, error", [
    (lambda claim: claim["metadata"].update(uid="another"), "is now another object"),
    (lambda claim: claim["status"].clear(), "has no device of gpu.gemshare.io on node node-a"),
    (lambda claim: claim["status"]["allocation"]["devices"]["results"][0].update(
        device="gpu-gone"), "'gpu-gone', which is not one of this node's GPUs now"),
    (lambda claim: claim["status"]["allocation"]["devices"]["results"][0].update(
        consumedCapacity={"memory": "100Gi", "compute": "30"}), "more than it has"),
    (lambda claim: claim["status"]["allocation"]["devices"]["results"][0].update(
        consumedCapacity={"memory": "lots", "compute": "30"}), "'lots' is not a quantity"),
])
def test_a_claim_that_cannot_be_ours_is_refused_saying_why(dra_node, change, error):
    namespace, uid, name = CLAIM
    claim = allocated_claim(namespace, name, uid, NODE, THIRD_DEVICE,
                            {"memory": "8Gi", "compute": "30"})
    change(claim)
    dra_node.api_server.add_claim(claim)
    dra_node.kubelet.register()
    assert error in dra_node.kubelet.prepare(CLAIM)[CLAIM[1]].error
    assert not dra_node.cdi_dir.exists() or not list(dra_node.cdi_dir.iterdir())


def test_without_consumable_capacity_a_claim_gets_the_whole_gpu(dra_node):
    add_claim(dra_node, consumed={})
    dra_node.kubelet.register()
    (cdi_id,) = dra_node.kubelet.prepare(CLAIM)[CLAIM[1]].devices[0].cdi_device_ids
    terms = parse_cdi_id(cdi_id)
    assert (terms.memory_bytes, terms.compute_units) == (40 * GIB, 100)


def test_a_whole_gpu_claim_must_consume_the_whole_device(dra_node):
    add_claim(dra_node, consumed={"memory": "8Gi", "compute": "30"}, whole=True)
    dra_node.kubelet.register()
    error = dra_node.kubelet.prepare(CLAIM)[CLAIM[1]].error
    assert "asks for a whole GPU" in error and "memory: 42949672960 and compute: 100" in error
    add_claim(dra_node, consumed={"memory": "40Gi", "compute": "100"}, whole=True)
    assert dra_node.kubelet.prepare(CLAIM)[CLAIM[1]].error == ""


def test_a_kubelet_that_wiped_the_registry_is_registered_again(dra_node):
    dra_node.kubelet.register()
    socket = next((dra_node.directory / "registry").glob("*-reg.sock"))
    socket.unlink()
    wait_until(socket.exists, "a new socket")
    add_claim(dra_node)
    dra_node.kubelet.register()
    assert dra_node.kubelet.prepare(CLAIM)[CLAIM[1]].error == ""
