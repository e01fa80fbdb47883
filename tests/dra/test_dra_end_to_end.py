"""End to end on the stand-ins: a node of four fake GPUs publishes four devices, each with its own
capacity; a claim of 8 GiB and 30 compute units on the third GPU is prepared; two programs of
one container, started with that claim's CDI edits (as root, in a mount namespace of their own)
and each with an environment that sets its own LD_PRELOAD and another pod's POD_NAME, run under
the library through /etc/ld.so.preload, with the 8 GiB budget shared between them and weight 3,
as the scheduler learns from the kubelet's pod-resources listing of the claim. Unprepared, the
node offers the container no terms any more."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import trio
from dra_helpers import FOUR_GPUS, GIB, NODE
from node_standins import StandInKubelet, StandInRuntime, container_path
from standin_api_server import allocated_claim

from gemshare_dra.inventory import GpuInfo
from gemshare_dra.resource_slice import device_name
from gemshare_nvs.kubernetes.cgroups import ContainerRef
from gemshare_nvs.kubernetes.claim_devices import DRIVER, parse_cdi_id
from gemshare_nvs.kubernetes.node import NodeLookup

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "libnvs"))
import libnvs_programs  # noqa: E402
from libnvs_programs import FAKECUDA, LIBNVS, wait_for_client  # noqa: E402

CDI_RUN = Path(__file__).with_name("cdi_run.py")
THIRD = FOUR_GPUS[2]
CLAIM = ("ml", "5e2a9c1d-7b3f-4d6e-8a9b-1c2d3e4f5a6b", "infer-0-gpu")
CONTAINER = "e3" * 32
POD_UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
DEADLINE_S = 60.0

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"),
    reason="applying CDI mounts needs root and unshare (a mount namespace of the test's own)")


@pytest.fixture(scope="module")
def built():
    libnvs_programs.make("lib", "fakecuda")


def program(directory: Path, spec: Path, device: str, proc: Path, index: int, steps: list):
    """A program of the container, with the pod's own environment and the claim's CDI edits."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("GEMSHARE_", "FAKECUDA_", "POD_")) and key != "LD_PRELOAD"}
    env.update(LD_LIBRARY_PATH=str(FAKECUDA), FAKECUDA_DEVICE_MEM="40G",
               FAKECUDA_SHARED_DEVICE=str(directory / "device"),
               LD_PRELOAD="libm.so.6",  # the pod's own preload, which once dropped ours
               POD_NAME="somebody-else", POD_NAMESPACE="prod")
    scratch = directory / f"scratch-{index}"
    scratch.mkdir()
    output = open(directory / f"program-{index}.out", "w")
    return subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", sys.executable, str(CDI_RUN),
         str(spec), device, str(scratch), str(proc),
         container_path("systemd", "cri-o", POD_UID, CONTAINER), "--",
         str(FAKECUDA / "standin"), *steps],
        env=env, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


async def wait_file(path: Path) -> None:
    with trio.fail_after(DEADLINE_S):
        while not path.exists():
            await trio.sleep(0.05)


async def test_a_claim_on_the_third_gpu_is_its_containers_budget_whatever_its_environment(
        built, dra_node, inprocess_scheduler, short_tmp_dirs):
    devices = dra_node.slice()["spec"]["devices"]
    assert [device["capacity"]["memory"]["value"] for device in devices] == \
        ["80Gi", "80Gi", "40Gi", "24Gi"]

    directory = short_tmp_dirs()
    proc = directory / "proc"
    runtime = StandInRuntime(directory / "crio.sock")
    kubelet = StandInKubelet(directory / "kubelet.sock")
    try:
        runtime.add(CONTAINER, "ml", "infer-0", "main", POD_UID)
        running = await inprocess_scheduler(cri_socket=str(runtime.path),
                                            pod_resources_socket=str(kubelet.path), proc=proc)
        preparer = dra_node.driver.services.preparer
        preparer.paths = replace(preparer.paths, library=str(LIBNVS),
                                 scheduler_socket=str(running.socket))
        third = device_name(GpuInfo(2, THIRD["uuid"], "", 0))
        namespace, uid, name = CLAIM
        dra_node.api_server.add_claim(allocated_claim(
            namespace, name, uid, NODE, third, {"memory": "8Gi", "compute": "30"}))
        dra_node.kubelet.register()
        answer = (await trio.to_thread.run_sync(dra_node.kubelet.prepare, CLAIM))[uid]
        assert answer.error == ""
        (cdi_id,) = answer.devices[0].cdi_device_ids
        # The kubelet lists what the driver answered for the containers that use the claim.
        kubelet.prepare_claim("ml", "infer-0", "main", name, DRIVER, NODE, third, [cdi_id])

        spec = dra_node.cdi_dir / f"gemshare.io-claim_{uid}.json"
        programs = [program(directory, spec, parse_cdi_id(cdi_id).name, proc, index,
                            ["init", "total-mem", "alloc", "a", "1M",
                             "touch-file", str(directory / f"ready-{index}"),
                             "wait-file", str(directory / "go")])
                    for index in range(2)]
        for index in range(2):
            await wait_file(directory / f"ready-{index}")
        clients = [await trio.to_thread.run_sync(wait_for_client, running.socket, process.pid)
                   for process in programs]
        (directory / "go").touch()
        outputs = []
        for index, process in enumerate(programs):
            with trio.fail_after(DEADLINE_S):
                while process.poll() is None:
                    await trio.sleep(0.05)
            outputs.append((directory / f"program-{index}.out").read_text())
            assert process.returncode == 0, outputs[-1]
    finally:
        runtime.stop()
        kubelet.stop()

    for client, output in zip(clients, outputs):
        # Its own pod, whatever its POD_NAME says; the claim's terms from the node.
        assert (client["namespace"], client["pod"], client["container"]) == \
            ("ml", "infer-0", "main")
        assert client["identity_from"] == "node"
        assert (client["memory_limit"], client["weight"]) == (8 * GIB, 3.0)
        assert client["terms_from"]["memory_limit"] == "kubelet"
        assert client["node"]["units"] == [{"gpu_uuid": THIRD["uuid"], "memory_units": 0,
                                            "memory_bytes": 8 * GIB, "compute_units": 30}]
        assert client["budget"]["memory_bytes"] == 8 * GIB
        assert sorted(client["budget"]["clients"]) == sorted(c["id"] for c in clients)
        # The library ran in it (its own LD_PRELOAD notwithstanding): the GPU looks 8 GiB big.
        assert f"total={8 * GIB}" in output, output

    # Unprepared: the spec is gone, and the node gives the container no terms any more.
    assert dra_node.kubelet.unprepare(CLAIM) == {uid: ""}
    assert not spec.exists()
    kubelet = StandInKubelet(directory / "kubelet-after.sock")  # it lists the claim no more
    runtime = StandInRuntime(directory / "crio-after.sock")
    runtime.add(CONTAINER, "ml", "infer-0", "main", POD_UID)
    lookup = NodeLookup(str(runtime.path), str(kubelet.path))
    try:
        identity, _ = lookup.identify(ContainerRef(CONTAINER, POD_UID, "cri-o"))
        assert identity.gpus == ()
    finally:
        lookup.close()
        runtime.stop()
        kubelet.stop()
