"""uid 0 in a container is not the node's root: whoever may create a pod chooses its uid, so its
programs are held to the per-user caps and the log budget of any user, while the
node's own root stays above them. The test runs as root: each program's cgroup, faked in a
/proc of the test's, says whether it is in a pod."""

from __future__ import annotations

import logging
import os

import pytest
import trio
from scheduler_on_node import DEADLINE, HOST, TRAINER, node  # noqa: F401 (a fixture)
from trio_peer import Peer

from gemshare_nvs import protocol as p

CAP = 2


OPEN = []  # the programs' connections, kept open until the test ends


async def registers(running, node, where: str) -> p.Registered | p.Error:
    """A program of uid 0 in `where` (a container, or HOST) that registers, and stays
    connected: what it got."""
    peer, pid = await Peer.connect_as_another_process(running.socket)
    OPEN.append(peer)
    node.place(pid, where)
    await peer.send(p.Register(0, 0, "python"))
    while not isinstance(message := await peer.recv(DEADLINE), (p.Registered, p.Error)):
        pass
    return message


@pytest.fixture
def as_root():
    if os.geteuid() != 0:
        pytest.skip("the programs must be uid 0")
    yield
    OPEN.clear()


async def test_uid_0_in_a_container_is_held_to_the_per_user_cap(inprocess_scheduler, node,
                                                                 as_root):
    node.container(TRAINER, "ml", "train-0", "main")
    running = await inprocess_scheduler(**node.settings(max_clients_per_user=CAP))
    with trio.fail_after(DEADLINE):
        got = [await registers(running, node, TRAINER) for _ in range(CAP + 1)]
        on_host = [await registers(running, node, HOST) for _ in range(CAP + 1)]
    assert [type(message) for message in got] == [p.Registered] * CAP + [p.Error]
    assert got[-1].code == p.ErrorCode.TOO_MANY_CLIENTS and "uid 0" in got[-1].text
    # The node's root is held to no cap, and the container's programs do not count as its.
    assert all(isinstance(message, p.Registered) for message in on_host)


async def test_uid_0_in_a_container_spends_a_users_log_budget(inprocess_scheduler, node,
                                                              as_root, caplog):
    caplog.set_level(logging.INFO, "gemshare.scheduler")
    node.container(TRAINER, "ml", "train-0", "main")
    running = await inprocess_scheduler(**node.settings())
    with trio.fail_after(DEADLINE):
        assert isinstance(await registers(running, node, TRAINER), p.Registered)
        assert isinstance(await registers(running, node, HOST), p.Registered)
    peers = {record.peer for record in caplog.records
             if record.getMessage().startswith("register client")}
    assert peers == {"uid 0 in a container", "uid 0 (root or the control group)"}
