"""Where the node can tell who a program is, what the program says of itself selects nothing: a
process on the host that claims a pod's namespace or label gets what any host process gets, and
a program whose pod the node cannot name yet has the node's default terms until it can, then
its own pod's, live (docs/security.md)."""

from __future__ import annotations

import logging

import trio
from scheduler_on_node import (
    DEADLINE,
    GIB,
    HOST,
    TRAINER,
    Node,
    next_limits,
    node,  # noqa: F401 (a fixture)
    program,
    status_of,
)

from gemshare_nvs import protocol as p

SERVING_RULES = ('[[rule]]\nmatch = { label = "vip" }\nweight = 9\n\n'
                 '[[rule]]\nmatch = { namespace = "serving" }\nweight = 8\n'
                 'memory_limit = "64GiB"\n')
EVERYONE_ELSE = '[[rule]]\nmatch = { process = "*" }\nmemory_limit = "1GiB"\n'


def config(short_tmp_dirs, text: str):
    path = short_tmp_dirs() / "gemshare.toml"
    path.write_text(text)
    return path


async def test_a_host_process_claiming_a_namespace_and_a_label_gets_neither(
        inprocess_scheduler, node, short_tmp_dirs, caplog):
    caplog.set_level(logging.WARNING, "gemshare.scheduler")
    running = await inprocess_scheduler(**node.settings(
        config=config(short_tmp_dirs, SERVING_RULES + EVERYONE_ELSE)))
    with trio.fail_after(DEADLINE):
        peer, got = await program(running, node, HOST, says=("serving", "api-0"), label="vip")
        client, = (await status_of(running))["clients"]
    # The rule for everyone else, not the one for the namespace it names: 1 GiB, not 64.
    assert got == [p.Limits(1 * GIB, 0), p.Registered(1, p.Mode.ON, 30)]
    assert (client["weight"], client["memory_limit"]) == (1.0, 1 * GIB)
    assert (client["namespace"], client["pod"], client["label"], client["identity_from"]) == \
        ("", "", "", "node: in no pod")
    claims = [r.getMessage() for r in caplog.records if "it says it is" in r.getMessage()]
    assert len(claims) == 1 and "pod serving/api-0, label vip" in claims[0]


async def test_a_process_with_no_cgroup_to_read_is_in_no_pod(inprocess_scheduler, node,
                                                            short_tmp_dirs):
    running = await inprocess_scheduler(**node.settings(
        config=config(short_tmp_dirs, SERVING_RULES)))
    with trio.fail_after(DEADLINE):
        peer, got = await program(running, node, None, says=("serving", "api-0"))
        client, = (await status_of(running))["clients"]
    assert got == [p.Registered(1, p.Mode.ON, 30)]
    assert (client["weight"], client["memory_limit"], client["identity_from"]) == \
        (1.0, None, "node: in no pod")


async def named_when_the_node_answers(running, node: Node, let_answer) -> None:
    """A program of TRAINER (8 GiB, 30 compute units) that claims the serving namespace while
    the node cannot name its pod: the defaults, then its container's terms once `let_answer()`
    lets the node answer."""
    peer, got = await program(running, node, TRAINER, says=("serving", "api-0"))
    client, = (await status_of(running))["clients"]
    assert got == [p.Registered(1, p.Mode.ON, 30)]  # no 64 GiB, no LIMITS at all
    assert (client["weight"], client["memory_limit"], client["namespace"],
            client["identity_from"]) == (1.0, None, "", "node: not named yet")
    let_answer()
    assert await next_limits(peer) == p.Limits(8 * GIB, 0)
    client, = (await status_of(running))["clients"]
    assert (client["namespace"], client["pod"], client["container"], client["identity_from"],
            client["weight"], client["memory_limit"]) == \
        ("ml", "train-0", "main", "node", 3.0, 8 * GIB)
    assert client["terms_from"]["memory_limit"] == "kubelet"


async def test_a_container_the_runtime_does_not_know_yet_is_named_later(
        inprocess_scheduler, node, short_tmp_dirs):
    node.container(TRAINER, "ml", "train-0", "main", memory_gib=8, compute=30, known=False)
    running = await inprocess_scheduler(**node.settings(
        config=config(short_tmp_dirs, SERVING_RULES)))
    with trio.fail_after(DEADLINE):
        await named_when_the_node_answers(
            running, node, lambda: node.runtime.add(TRAINER, "ml", "train-0", "main"))
    assert node.runtime.calls.count("ContainerStatus") >= 2


async def test_a_runtime_socket_missing_at_first_names_the_pod_once_it_serves(
        inprocess_scheduler, short_tmp_dirs):
    node = Node(short_tmp_dirs(), runtime=False)
    try:
        node.container(TRAINER, "ml", "train-0", "main", memory_gib=8, compute=30)
        running = await inprocess_scheduler(**node.settings(
            config=config(short_tmp_dirs, SERVING_RULES)))
        with trio.fail_after(DEADLINE):
            await named_when_the_node_answers(running, node, node.start_runtime)
    finally:
        node.stop()
