"""The control operations around configuration, against the in-process server: `set` with the
min slice and `clear`, `client` (one program's terms), `reload`; and rules matched on the
peer's user name, which the server looks up when a client registers."""

from __future__ import annotations

import os
import pwd

import pytest
from trio_peer import Peer

from gemshare_nvs import protocol as p

MY_USER = pwd.getpwuid(os.getuid()).pw_name


async def scheduler_with(inprocess_scheduler, short_tmp_dirs, text: str | None = None,
                         **options):
    """A scheduler reading `text` as its config file, keeping its settings in its own state
    directory; and that file's path."""
    directory = short_tmp_dirs()
    config = directory / "gemshare.toml"
    if text is not None:
        config.write_text(text)
    running = await inprocess_scheduler(config=config, state_dir=directory / "state", **options)
    return running, config


async def status_of(peer: Peer) -> dict:
    return (await peer.control({"op": "status"}))["status"]


async def client_entry(peer: Peer, client_id: int) -> dict:
    return next(c for c in (await status_of(peer))["clients"] if c["id"] == client_id)


async def test_a_rule_on_the_user_name_applies_to_that_users_clients(inprocess_scheduler,
                                                                   short_tmp_dirs):
    running, _ = await scheduler_with(inprocess_scheduler, short_tmp_dirs, f"""
[[rule]]
match = {{ user = "{MY_USER}", process = "trainer" }}
weight = 4
gpu_limit = 0.5
""")
    trainer, other, control = [await Peer.connect(running.socket) for _ in range(3)]
    trained = await trainer.register("trainer")
    plain = await other.register("notebook")
    entry = await client_entry(control, trained.client_id)
    assert (entry["weight"], entry["gpu_limit"]) == (4, 0.5)
    assert entry["terms_from"]["weight"].startswith("config rule 1 (")
    assert (await client_entry(control, plain.client_id))["weight"] == 1


async def test_set_takes_the_min_slice_and_clear_uncovers_the_config(inprocess_scheduler,
                                                                   short_tmp_dirs):
    running, _ = await scheduler_with(inprocess_scheduler, short_tmp_dirs, "tq = 20\n")
    peer = await Peer.connect(running.socket)
    reply = await peer.control({"op": "set", "tq": 5, "min_slice_ms": 50})
    assert reply == {"ok": True, "tq": 5, "anti_thrash": "on", "min_slice_ms": 50}
    status = await status_of(peer)
    assert (status["tq"], status["min_slice_ms"]) == (5, 50)
    assert status["settings_from"]["tq"] == "gemsharectl"
    assert status["runtime_settings"]["values"] == {"tq": 5, "min_slice_ms": 50}
    reply = await peer.control({"op": "set", "clear": True})
    assert (reply["tq"], reply["min_slice_ms"]) == (20, 300)
    status = await status_of(peer)
    assert status["settings_from"]["tq"].startswith("config (")
    assert status["settings_from"]["min_slice_ms"] == "default"
    assert status["runtime_settings"]["values"] == {}


@pytest.mark.parametrize("body, words", [
    ({"op": "set", "clear": "yes"}, "clear must be true or false"),
    ({"op": "set", "min_slice_ms": -1}, "min slice must be a whole number"),
    ({"op": "set", "clear": False}, "set needs tq, anti_thrash or both"),
    ({"op": "client", "weight": 2}, "client needs the pid"),
    ({"op": "client", "pid": 0, "weight": 2}, "pid must be a whole number from 1"),
    ({"op": "client", "pid": 1}, "client needs weight, gpu_limit, memory_limit or reset"),
    ({"op": "client", "pid": 1, "weight": 0}, "weight must be a number greater than 0"),
    ({"op": "client", "pid": 1, "weight": None}, "weight must be a number"),
    ({"op": "client", "pid": 1, "gpu_limit": 1.5}, "gpu_limit must be a number greater than 0 "
                                                   "and at most 1, not 1.5"),
    ({"op": "client", "pid": 1, "memory_limit": "lots"}, "memory_limit must be a size"),
    ({"op": "client", "pid": 1, "reset": 1}, "reset must be true or false"),
    ({"op": "client", "pid": 1, "colour": "red"}, "client accepts only pid, weight, "
                                                  "gpu_limit, memory_limit, reset, not colour"),
    ({"op": "client", "pid": 999999, "weight": 2}, "no client of the scheduler has pid 999999"),
    ({"op": "reload", "now": True}, "reload takes nothing besides op, not now"),
    ({"op": "client", "pid": 1, "sm_share": 30}, "sm_share is taken when a program starts"),
    ({"op": "client", "pid": 1, "mps_priority": "low"},
     "mps_priority is taken when a program starts; give it in a config rule"),
])
async def test_invalid_requests_change_nothing(inprocess_scheduler, short_tmp_dirs, body,
                                               words):
    running, _ = await scheduler_with(inprocess_scheduler, short_tmp_dirs)
    peer = await Peer.connect(running.socket)
    reply = await peer.control(body)
    assert reply["ok"] is False and reply["code"] == "invalid", reply
    assert words in reply["error"] and "nothing was changed" in reply["error"], reply["error"]


async def test_client_gives_its_terms_over_the_rules_and_reset_drops_them(inprocess_scheduler,
                                                                        short_tmp_dirs):
    running, _ = await scheduler_with(inprocess_scheduler, short_tmp_dirs, """
[[rule]]
match = { process = "*" }
gpu_limit = 0.5
memory_limit = "4GiB"
""")
    client, control = await Peer.connect(running.socket), await Peer.connect(running.socket)
    await client.send(p.Register(0, 0, "trainer"))
    assert await client.recv() == p.Limits(4 << 30)  # the rule's, before REGISTERED
    registered = await client.recv()
    assert isinstance(registered, p.Registered)
    reply = await control.control({"op": "client", "pid": os.getpid(), "weight": 2.5,
                                   "gpu_limit": None, "memory_limit": "8GiB"})
    assert reply == {"ok": True, "pid": os.getpid(), "reset": False, "weight": 2.5,
                     "gpu_limit": None, "memory_limit": 8 << 30}
    entry = await client_entry(control, registered.client_id)
    assert (entry["weight"], entry["gpu_limit"], entry["memory_limit"]) == (2.5, None, 8 << 30)
    assert entry["terms_from"] == {"weight": "gemsharectl", "gpu_limit": "gemsharectl",
                                   "memory_limit": "gemsharectl", "sm_share": "default",
                                   "mps": "default", "mps_priority": "default"}
    assert await client.recv() == p.Limits(8 << 30)
    await control.control({"op": "client", "pid": os.getpid(), "reset": True})
    assert await client.recv() == p.Limits(4 << 30)
    entry = await client_entry(control, registered.client_id)
    assert (entry["weight"], entry["gpu_limit"], entry["memory_limit"]) == (1, 0.5, 4 << 30)


async def test_reload_takes_a_good_file_and_refuses_a_bad_one(inprocess_scheduler,
                                                            short_tmp_dirs):
    running, config = await scheduler_with(inprocess_scheduler, short_tmp_dirs, "tq = 20\n")
    peer = await Peer.connect(running.socket)
    config.write_text("tq = 25\n")
    reply = await peer.control({"op": "reload"})
    assert reply["ok"] is True and reply["config"]["loaded"] is True
    assert (await status_of(peer))["tq"] == 25
    config.write_text("tq = 25\n[[rule]]\nweight = 0\n")
    reply = await peer.control({"op": "reload"})
    assert reply["ok"] is False and reply["code"] == "invalid"
    assert f"{config}:2: rule 1 match: missing" in reply["error"]
    assert f"{config}:3: rule 1 weight" in reply["error"]
    status = await status_of(peer)
    assert status["tq"] == 25 and "2 problems" in status["config"]["problem"]


async def test_reload_without_a_config_file_says_so(inprocess_scheduler):
    running = await inprocess_scheduler()
    peer = await Peer.connect(running.socket)
    reply = await peer.control({"op": "reload"})
    assert (reply["ok"], reply["code"]) == (False, "invalid")
    assert "runs without a config file" in reply["error"]
