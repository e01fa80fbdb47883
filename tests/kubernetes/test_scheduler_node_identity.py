"""The scheduler learns each program's container from the node and gives the container's units
as one budget: raw protocol clients connected from processes of their own (so that each has its
pid), their cgroups faked in a /proc of the test's, a stand-in runtime and kubelet on sockets."""

from __future__ import annotations

import logging

import pytest
import trio
from scheduler_on_node import (
    DEADLINE,
    GIB,
    GPU,
    HOST,
    NOTEBOOK,
    TRAINER,
    next_limits,
    node,  # noqa: F401 (a fixture)
    program,
    status_of,
)

from gemshare_nvs import protocol as p
from gemshare_nvs.core.rules.budgets import BUDGET_REPORT_S
from gemshare_nvs.kubernetes.lookups import REGISTER_WAIT_S

async def test_a_program_naming_another_pod_gets_its_own_containers_terms(
        inprocess_scheduler, node, short_tmp_dirs, caplog):
    caplog.set_level(logging.INFO, "gemshare.scheduler")
    config = short_tmp_dirs() / "gemshare.toml"
    config.write_text('[[rule]]\nmatch = { pod = "inference-7" }\nweight = 50\n'
                      'memory_limit = "64GiB"\n')
    node.container(TRAINER, "ml", "train-0", "main", memory_gib=8, compute=20)
    running = await inprocess_scheduler(**node.settings(config=config))
    with trio.fail_after(DEADLINE):
        _, got = await program(running, node, TRAINER, says=("prod", "inference-7\n"))
        client, = (await status_of(running))["clients"]
    assert got[0] == p.Limits(8 * GIB, 0)
    assert (client["namespace"], client["pod"], client["container"]) == ("ml", "train-0", "main")
    assert client["identity_from"] == "node"
    assert (client["weight"], client["memory_limit"]) == (2.0, 8 * GIB)
    assert client["terms_from"]["weight"] == client["terms_from"]["memory_limit"] == "kubelet"
    mismatches = [r.getMessage() for r in caplog.records if "it says it is pod" in r.getMessage()]
    assert len(mismatches) == 1 and r"prod/inference-7?" in mismatches[0]  # its newline escaped
    assert "the node says ml/train-0" in mismatches[0]


async def test_two_programs_of_one_container_share_one_memory_budget(inprocess_scheduler, node,
                                                                     caplog):
    caplog.set_level(logging.WARNING, "gemshare.scheduler")
    node.container(TRAINER, "ml", "train-0", "main", memory_gib=8)
    node.container(NOTEBOOK, "ml", "notebook", "lab", memory_gib=4, first_unit=8)
    running = await inprocess_scheduler(**node.settings())
    with trio.fail_after(DEADLINE):
        first, got_first = await program(running, node, TRAINER)
        second, got_second = await program(running, node, TRAINER)
        other, got_other = await program(running, node, NOTEBOOK)
        assert [got_first[0], got_second[0], got_other[0]] == \
            [p.Limits(8 * GIB, 0), p.Limits(8 * GIB, 0), p.Limits(4 * GIB, 0)]
        await first.send(p.MemReport(0, 0, 3 * GIB, 80 * GIB))
        assert await next_limits(second) == p.Limits(8 * GIB, 3 * GIB)
        await second.send(p.MemReport(0, 0, 1 * GIB, 80 * GIB))
        assert await next_limits(first) == p.Limits(8 * GIB, 1 * GIB)
        await trio.sleep(BUDGET_REPORT_S)
        await second.send(p.MemReport(0, 0, 6 * GIB, 80 * GIB))  # past it: both at once
        assert await next_limits(first) == p.Limits(8 * GIB, 6 * GIB)
        status = await status_of(running)
        await second.aclose()
        assert await next_limits(first) == p.Limits(8 * GIB, 0)
    trainer = [c for c in status["clients"] if c["container"] == "main"]
    assert [c["budget"]["clients"] for c in trainer] == [[1, 2], [1, 2]]
    assert [c["budget"]["others_allocated_bytes"] for c in trainer] == [6 * GIB, 3 * GIB]
    assert trainer[0]["budget"]["memory_bytes"] == 8 * GIB
    assert [c["budget"]["clients"] for c in status["clients"] if c["container"] == "lab"] == [[3]]
    assert any("past its 8192 MiB" in r.getMessage() for r in caplog.records)
    await other.aclose()


@pytest.mark.parametrize("memory_gib, compute, cap, terms", [
    (8, 0, "off", {"memory_limit": 8 * GIB, "weight": 1.0, "gpu_limit": None}),
    (0, 30, "gpu_limit", {"memory_limit": None, "weight": 3.0, "gpu_limit": 0.3}),
    (8, 30, "off", {"memory_limit": 8 * GIB, "weight": 3.0, "gpu_limit": None}),
])
async def test_memory_alone_compute_alone_and_both(inprocess_scheduler, node, memory_gib,
                                                  compute, cap, terms):
    node.container(TRAINER, "ml", "train-0", "main", memory_gib=memory_gib, compute=compute)
    running = await inprocess_scheduler(**node.settings(compute_cap=cap))
    with trio.fail_after(DEADLINE):
        _, got = await program(running, node, TRAINER)
        client, = (await status_of(running))["clients"]
    assert {name: client[name] for name in terms} == terms
    assert (got[0] == p.Limits(8 * GIB, 0)) == bool(memory_gib)
    assert client["budget"]["compute_units"] == (compute or None)
    assert client["node"]["units"] == [{"gpu_uuid": GPU, "memory_units": memory_gib,
                                        "memory_bytes": memory_gib * GIB,
                                        "compute_units": compute}]


async def test_without_the_node_sockets_programs_in_no_pod_are_what_they_say(
        inprocess_scheduler, node):
    node.container(TRAINER, "ml", "train-0", "main", memory_gib=8)
    running = await inprocess_scheduler(cri_socket="", pod_resources_socket="", proc=node.proc)
    with trio.fail_after(DEADLINE):
        on_host, got = await program(running, node, HOST, says=("prod", "inference-7"))
        in_pod, _ = await program(running, node, TRAINER, says=("prod", "inference-7"))
        status = await status_of(running)
    host, pod = status["clients"]
    assert got == [p.Registered(1, p.Mode.ON, 30)]
    assert (host["namespace"], host["pod"], host["container"], host["identity_from"],
            host["budget"], host["node"]) == ("prod", "inference-7", None, "program", None, None)
    # Its cgroup names a pod, which nothing on this node can name: its words select nothing.
    assert (pod["namespace"], pod["pod"], pod["identity_from"]) == \
        ("", "", "node: not named yet")
    assert status["kubernetes"] == {"cri_socket": None, "pod_resources_socket": None,
                                    "node_identity_socket": None,
                                    "containers_known": 0, "compute_cap": "off"}
    assert node.runtime.calls == [] and node.kubelet.calls == []


async def test_a_runtime_that_hangs_stalls_neither_the_scheduler_nor_a_registration_for_long(
        inprocess_scheduler, node, caplog):
    caplog.set_level(logging.WARNING, "gemshare.scheduler")
    node.container(TRAINER, "ml", "train-0", "main", memory_gib=8)
    node.runtime.hold.clear()  # every ContainerStatus waits until the test lets it go
    running = await inprocess_scheduler(**node.settings())
    outside, _ = await program(running, node, None, name="outside")
    stalled = trio.Event()
    peers = []

    async def in_the_container() -> None:
        started = trio.current_time()
        peer, got = await program(running, node, TRAINER, says=("ml", "claims"))
        peers.append(peer)
        assert got == [p.Registered(2, p.Mode.ON, 30)]  # the defaults, no budget yet
        assert trio.current_time() - started < REGISTER_WAIT_S + 5
        stalled.set()

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(in_the_container)
            while node.runtime.calls == []:
                await trio.sleep(0.01)
            # Meanwhile the scheduler serves: a lock, a status.
            await outside.send(p.RequestLock(0))
            assert isinstance(await outside.recv(), p.LockGranted)
            assert not stalled.is_set()
            clients = (await status_of(running))["clients"]
            assert [c["name"] for c in clients] == ["outside"]
        claimed = [c for c in (await status_of(running))["clients"] if c["id"] == 2]
        # Not what it says: nobody's pod until the node names it.
        assert [(c["pod"], c["identity_from"]) for c in claimed] == [("", "node: not named yet")]
        node.runtime.hold.set()
        # Looked up again: its container's terms, LIMITS included, once the runtime answers.
        assert await next_limits(peers[0]) == p.Limits(8 * GIB, 0)
        status = await status_of(running)
    claimed = [c for c in status["clients"] if c["id"] == 2]
    assert [(c["pod"], c["identity_from"], c["memory_limit"]) for c in claimed] == \
        [("train-0", "node", 8 * GIB)]
    assert any("DEADLINE_EXCEEDED" in r.getMessage() for r in caplog.records)


async def test_a_later_program_of_the_container_is_looked_up_once(inprocess_scheduler, node):
    node.container(TRAINER, "ml", "train-0", "main", memory_gib=8)
    running = await inprocess_scheduler(**node.settings())
    with trio.fail_after(DEADLINE):
        peers = [(await program(running, node, TRAINER))[0] for _ in range(3)]
        status = await status_of(running)
    assert node.runtime.calls == ["ContainerStatus"]
    # Its units by Get once; List is the reading of what the node's containers hold.
    assert [call for call in node.kubelet.calls if call != "List"] == ["Get"]
    assert status["kubernetes"]["containers_known"] == 1
    # The container's weight: it is split only among those of them that want the GPU.
    assert [c["weight"] for c in status["clients"]] == [1.0] * len(peers)


async def test_a_view_only_program_gets_its_limits_and_is_shown_nowhere(inprocess_scheduler,
                                                                        node):
    node.container(TRAINER, "ml", "train-0", "main", memory_gib=8, compute=30)
    running = await inprocess_scheduler(**node.settings())
    with trio.fail_after(DEADLINE):
        trainer, _ = await program(running, node, TRAINER)
        await trainer.send(p.MemReport(0, 0, 2 * GIB, 80 * GIB))
        await trio.sleep(BUDGET_REPORT_S)
        smi, got = await program(running, node, TRAINER, flags=p.REG_VIEW_ONLY, name="nvidia-smi")
        await smi.send(p.RequestLock(0))  # not a client: nothing comes of it
        status = await status_of(running)
    assert got == [p.Limits(8 * GIB, 2 * GIB), p.Registered(2, p.Mode.ON, 30)]
    assert [c["name"] for c in status["clients"]] == ["python"]
    assert status["clients"][0]["weight"] == 3.0
    assert status["connections"] == 3  # the trainer, nvidia-smi and the status request
    assert all(not device["waiters"] and device["holders"] in ([], [1])
               for device in status["devices"])
