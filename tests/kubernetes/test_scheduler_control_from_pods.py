"""Every GPU pod has the scheduler's socket mounted: a process in a pod may register and take
the lock, and nothing else. Its control requests (status, which names every tenant of the node;
set; client; reload) are refused with a clear error before they hold a control slot, while the
node's own users and the scheduler's own pod (kubectl exec) keep them (docs/security.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import trio
from node_standins import cgroup_file, container_path, put_in_container
from scheduler_on_node import DEADLINE, HOST, TRAINER, node, program  # noqa: F401 (a fixture)
from trio_peer import Peer

from gemshare_nvs import protocol as p

OWN_POD = "7d6c5b4a-3928-4716-a5b4-c3d2e1f00a1b"  # the scheduler's pod, not the trainer's
OWN_CONTAINER = "c3" * 32
OPERATIONS = [{"op": "status"}, {"op": "set", "tq": 5}, {"op": "client", "pid": 1, "weight": 9},
              {"op": "reload"}]


async def control_from(running, node, where: str, body: dict) -> list:
    """What a process in `where` (a container ID, or HOST) gets for one control request, up to
    the scheduler's reply or its closing the connection."""
    peer, pid = await Peer.connect_as_another_process(running.socket)
    node.place(pid, where)
    await peer.send(p.Control(body))
    got = [await peer.recv(DEADLINE)]
    if isinstance(got[0], p.Error):
        got += await peer.closed_after(DEADLINE)
    await peer.aclose()
    return got


@pytest.mark.parametrize("body", OPERATIONS, ids=[body["op"] for body in OPERATIONS])
async def test_a_process_in_a_pod_may_send_no_control_request(inprocess_scheduler, node, body):
    running = await inprocess_scheduler(**node.settings())
    node.container(TRAINER, "ml", "train-0", "main", memory_gib=8)
    with trio.fail_after(DEADLINE):
        got = await control_from(running, node, TRAINER, body)
    refusal, = got
    assert isinstance(refusal, p.Error) and refusal.code == p.ErrorCode.PERMISSION
    assert "refused from inside a pod" in refusal.text
    assert "pod 0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0" in refusal.text
    assert running.server.policy.tq == 30  # the set did not happen


async def test_the_same_pod_still_registers_and_takes_the_lock(inprocess_scheduler, node):
    running = await inprocess_scheduler(**node.settings())
    node.container(TRAINER, "ml", "train-0", "main", memory_gib=8)
    with trio.fail_after(DEADLINE):
        refused = await control_from(running, node, TRAINER, {"op": "status"})
        peer, got = await program(running, node, TRAINER)
        await peer.send(p.RequestLock(0))
        while not isinstance(message := await peer.recv(DEADLINE), p.LockGranted):
            pass
    assert refused[0].code == p.ErrorCode.PERMISSION
    assert p.Limits(8 << 30, 0) in got and isinstance(got[-1], p.Registered)
    assert message.device == 0


async def test_pods_hold_no_control_slot(inprocess_scheduler, node):
    running = await inprocess_scheduler(**node.settings(max_control=4))
    node.container(TRAINER, "ml", "train-0", "main")
    with trio.fail_after(DEADLINE):
        for _ in range(6):  # more than the slots: each refused for being in a pod, not for room
            refusal, = await control_from(running, node, TRAINER, {"op": "status"})
            assert refusal.code == p.ErrorCode.PERMISSION
        reply = await control_from(running, node, HOST, {"op": "status"})
    assert isinstance(reply[0], p.ControlReply) and reply[0].body["ok"] is True


async def test_the_hosts_users_and_the_schedulers_own_pod_keep_control(inprocess_scheduler,
                                                                     node):
    # The scheduler runs in a pod of its own (this test's process stands for it): an exec into
    # it is the operator's way in (kubectl exec ds/gemshare-scheduler -- gemsharectl status).
    put_in_container(node.proc, os.getpid(), cgroup_file(2, container_path(
        "systemd", "cri-o", OWN_POD, OWN_CONTAINER)))
    running = await inprocess_scheduler(**node.settings())
    with trio.fail_after(DEADLINE):
        from_host = await control_from(running, node, HOST, {"op": "set", "tq": 7})
        from_own_pod = await Peer.connect(running.socket)  # this process: the scheduler's pod
        status = await from_own_pod.control({"op": "status"})
        await from_own_pod.aclose()
    assert from_host[0].body["ok"] is True and running.server.policy.tq == 7
    assert status["ok"] is True


def gemsharectl_in_a_pod(node, socket, container_id: str,
                         *args: str) -> subprocess.CompletedProcess:
    """`gemsharectl ARGS` (status) run by a process placed in `container_id` before it
    connects."""
    command = [sys.executable, "-m", "gemshare_ctl", *(args or ("status",)), "--socket",
               str(socket)]
    waiting = subprocess.Popen(["sh", "-c", 'read go && exec "$@"', "sh", *command],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    node.place(waiting.pid, container_id)  # exec keeps the pid: the cgroup file is gemsharectl's
    out, err = waiting.communicate("go\n", timeout=DEADLINE)
    return subprocess.CompletedProcess(command, waiting.returncode, out, err)


async def test_gemsharectl_in_a_pod_says_why_it_is_refused(inprocess_scheduler, node):
    running = await inprocess_scheduler(**node.settings())
    node.container(TRAINER, "ml", "train-0", "main")
    result = await trio.to_thread.run_sync(gemsharectl_in_a_pod, node, running.socket, TRAINER)
    assert result.returncode == 3, result  # gemsharectl's exit status for permission denied
    assert "refused from inside a pod" in result.stderr
    assert "gemsharectl on the node" in result.stderr


async def test_doctor_in_a_pod_says_the_scheduler_answers_and_gives_no_status(
        inprocess_scheduler, node):
    running = await inprocess_scheduler(**node.settings())
    node.container(TRAINER, "ml", "train-0", "main")
    result = await trio.to_thread.run_sync(gemsharectl_in_a_pod, node, running.socket, TRAINER,
                                           "doctor", "--json")
    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["scheduler"]["status"] == "ok", checks["scheduler"]
    assert "from inside a pod it gives no status" in checks["scheduler"]["what"]
    assert checks["control"]["status"] == "ok"
    assert "from inside a pod nobody may change settings" in checks["control"]["what"]
