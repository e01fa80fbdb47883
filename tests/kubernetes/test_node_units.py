"""What every container on the node holds of each GPU: added up from the kubelet's List, asked
through the node-identity service (its second question, on the wire), read every few seconds
off the decision path, and reaching the scheduler: a program in a container without memory
units is limited to what the memory units of the others leave."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest
import trio
from node_standins import StandInKubelet, compute_units, memory_units
from scheduler_on_node import (  # noqa: F401 (node: a fixture)
    DEADLINE,
    GIB,
    GPU,
    NOTEBOOK,
    TRAINER,
    next_limits,
    node,
    program,
    status_of,
)

from gemshare_nvs import protocol as p
from gemshare_nvs.core.model.container import HeldUnits
from gemshare_nvs.identity_daemon import listen_on
from gemshare_nvs.kubernetes.allocation import held_by_gpu
from gemshare_nvs.kubernetes.cgroups import ContainerRef
from gemshare_nvs.kubernetes.claim_devices import ClaimDevice
from gemshare_nvs.kubernetes.identity_client import IdentityClient
from gemshare_nvs.kubernetes.identity_server import IdentityServer
from gemshare_nvs.kubernetes.identity_wire import (
    AskHeldUnits,
    held_answer,
    held_question,
    question,
    read_held_answer,
    read_question,
)
from gemshare_nvs.kubernetes.node import NodeLookup
from gemshare_nvs.service.readings.node_units import POLL_S, watch_node_units

OTHER_GPU = "GPU-00000000-1111-2222-3333-444444444444"
SLOT = f"{GPU}::3"  # a slot's ID: no unit


# ----- adding up ------------------------------------------------------------------------------

def test_every_containers_units_are_added_up_per_gpu_and_slots_count_for_nothing():
    claim = ClaimDevice(GPU, 2 * GIB, 5, "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0").cdi_id
    held = held_by_gpu([
        (memory_units(GPU, 8) + compute_units(GPU, 30), []),
        (memory_units(GPU, 4, first=8) + memory_units(OTHER_GPU, 2), []),
        ([SLOT], []),  # slots only: not a holder
        ([], [claim]),
    ])
    assert held == (HeldUnits(OTHER_GPU, 2 * GIB, 0, 1),
                    HeldUnits(GPU, 14 * GIB, 35, 3))


# ----- on the wire ----------------------------------------------------------------------------

def test_the_held_units_question_and_answer_round_trip():
    assert read_question(held_question()) == AskHeldUnits()
    reading = (HeldUnits(GPU, 60 * GIB, 90, 2), HeldUnits(OTHER_GPU, 0, 30, 1))
    assert read_held_answer(held_answer(reading, "")) == (reading, "")
    assert read_held_answer(held_answer((), "")) == ((), "")
    assert read_held_answer(held_answer(None, "the kubelet is away")) == \
        (None, "the kubelet is away")
    # The container question is as it was.
    ref = ContainerRef("ab" * 32, "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "cri-o")
    assert read_question(question(ref)) == ref


@pytest.mark.parametrize("line", [
    b'{"question": "everything"}\n',
    b'{"question": "held_units", "container_id": "x"}\n',
])
def test_a_question_that_is_neither_is_refused(line):
    with pytest.raises(ValueError):
        read_question(line)


@pytest.mark.parametrize("held", [
    [{"gpu_uuid": GPU, "memory_bytes": 1, "compute_units": 2}],  # no containers
    [{"gpu_uuid": GPU, "memory_bytes": -1, "compute_units": 2, "containers": 1}],
    [{"gpu_uuid": GPU, "memory_bytes": True, "compute_units": 2, "containers": 1}],
    [{"gpu_uuid": 7, "memory_bytes": 1, "compute_units": 2, "containers": 1}],
    [7],
    "all of it",
])
def test_a_malformed_held_answer_is_refused(held):
    with pytest.raises(ValueError):
        read_held_answer(json.dumps({"held": held, "problem": ""}).encode() + b"\n")


# ----- asking the kubelet, directly and through the service -----------------------------------

def kubelet_with_two_containers(path) -> StandInKubelet:
    kubelet = StandInKubelet(path)
    kubelet.allocate("ml", "train-0", "main", "gemshare.io/gpu-memory", memory_units(GPU, 60))
    kubelet.allocate("ml", "serve-0", "main", "gemshare.io/gpu-compute", compute_units(GPU, 30))
    kubelet.allocate("ml", "lab-0", "main", "gemshare.io/gpu", [SLOT])
    return kubelet


def test_the_kubelet_is_asked_for_every_container_and_a_kubelet_away_says_why(short_tmp_dirs):
    directory = short_tmp_dirs()
    kubelet = kubelet_with_two_containers(directory / "kubelet.sock")
    lookup = NodeLookup("", str(kubelet.path))
    try:
        assert lookup.lists_units
        assert lookup.held_units() == ((HeldUnits(GPU, 60 * GIB, 30, 2),), "")
        assert kubelet.calls == ["List"]
        kubelet.stop()
        held, problem = lookup.held_units()
        assert held is None and "did not list the node's containers" in problem
    finally:
        lookup.close()
        kubelet.stop()
    assert not NodeLookup("", "").lists_units


def test_the_node_identity_service_answers_what_the_node_holds(short_tmp_dirs):
    directory = short_tmp_dirs()
    kubelet = kubelet_with_two_containers(directory / "kubelet.sock")
    server = IdentityServer(listen_on(str(directory / "identity.sock")),
                            NodeLookup("", str(kubelet.path)))
    serving = threading.Thread(target=server.serve, daemon=True)
    serving.start()
    try:
        client = IdentityClient(str(directory / "identity.sock"))
        assert client.held_units() == ((HeldUnits(GPU, 60 * GIB, 30, 2),), "")
        deadline = time.monotonic() + DEADLINE
        while server.listed == 0 and time.monotonic() < deadline:  # counted once it is sent
            time.sleep(0.01)
        assert (server.listed, server.answered) == (1, 0)
        kubelet.stop()
        held, problem = client.held_units()
        assert held is None and "did not list" in problem  # the service's word, passed on
        server.stop()
        serving.join(DEADLINE)
        server.listener.close()
        held, problem = IdentityClient(str(directory / "identity.sock"), 0.5).held_units()
        assert held is None and "did not answer" in problem
    finally:
        server.stop()
        server.lookup.close()
        kubelet.stop()


# ----- reading every few seconds --------------------------------------------------------------

async def test_a_failing_or_slow_kubelet_leaves_the_last_reading_with_one_warning(caplog):
    caplog.set_level(logging.INFO, "gemshare.scheduler")
    good = (HeldUnits(GPU, 8 * GIB, 10, 1),)
    answers = [(good, ""), (None, "the kubelet is away"), (None, "the kubelet is away"),
               RuntimeError("nonsense"), "hang", ((), "")]
    taken = []

    def read():
        answer = answers.pop(0) if answers else ((), "")
        if isinstance(answer, Exception):
            raise answer
        if answer == "hang":
            time.sleep(0.5)  # past the poll interval: abandoned, not waited for
            return good, ""
        return answer

    with trio.move_on_after(2.0):
        await watch_node_units(read, taken.append, poll_s=0.1)
    assert taken[0] == good and () in taken
    assert good not in taken[1:]  # the hung call's answer came too late to be taken
    messages = [r.getMessage() for r in caplog.records]
    away = [m for m in messages if "the kubelet is away" in m]
    assert len(away) == 1 and "the last reading stays" in away[0]
    assert any("RuntimeError" in m for m in messages)
    assert any("no answer within 0.1 s" in m for m in messages)
    assert any("read again" in m for m in messages)


async def test_the_reading_reaches_the_scheduler_and_limits_a_container_without_memory_units(
        inprocess_scheduler, node):
    """On an 80 GiB GPU, a container holds 60 GiB of memory units and runs nothing; a program in
    a container of compute units alone gets the 20 GiB the units leave as its limit, once the
    scheduler knows the GPU's memory (here from the program's report, at the next reading)."""
    node.container(TRAINER, "ml", "train-0", "main", memory_gib=60)
    node.container(NOTEBOOK, "ml", "serve-0", "main", compute=30, first_unit=60)
    running = await inprocess_scheduler(**node.settings())
    with trio.fail_after(DEADLINE):
        peer, got = await program(running, node, NOTEBOOK)
        assert not any(isinstance(m, p.Limits) for m in got)  # GPU unknown yet: no limit
        await peer.send(p.DeviceUuid(0, 0, GPU))
        await peer.send(p.MemReport(0, 0, 0, 80 * GIB))
        assert await next_limits(peer) == p.Limits(20 * GIB, 0)
        status = await status_of(running)
    client, = status["clients"]
    assert (client["memory_limit"], client["weight"]) == (20 * GIB, 3.0)
    assert status["unheld"] == [
        {"gpu_uuid": GPU, "device": 0, "containers": 2, "memory_held_bytes": 60 * GIB,
         "memory_unheld_bytes": 20 * GIB, "compute_held_units": 30,
         "compute_unheld_units": 70}]
    assert node.kubelet.calls.count("List") <= 1 + DEADLINE / POLL_S
    await peer.aclose()
