"""Control operations: replies exactly as docs/protocol.md says; invalid values change nothing."""

import pytest
from trio_peer import Peer

STATUS_KEYS = {"tq", "anti_thrash", "grace_ms", "devices", "clients"}


async def control_peer(inprocess_scheduler, **options) -> Peer:
    running = await inprocess_scheduler(**options)
    return await Peer.connect(running.socket)


async def current(peer: Peer) -> tuple:
    status = (await peer.control({"op": "status"}))["status"]
    return status["tq"], status["anti_thrash"]


async def test_status_has_the_required_keys(inprocess_scheduler):
    peer = await control_peer(inprocess_scheduler, tq=7, grace_ms=1234)
    reply = await peer.control({"op": "status"})
    assert reply["ok"] is True and STATUS_KEYS <= set(reply["status"])
    assert (reply["status"]["tq"], reply["status"]["grace_ms"]) == (7, 1234)


@pytest.mark.parametrize("body, expected", [
    ({"tq": 45}, (45, "on")),
    ({"anti_thrash": "off"}, (30, "off")),
    ({"tq": 1, "anti_thrash": "auto"}, (1, "auto")),
    ({"tq": 86400}, (86400, "on")),
])
async def test_valid_set_is_applied_and_echoed(inprocess_scheduler, body, expected):
    peer = await control_peer(inprocess_scheduler)
    reply = await peer.control({"op": "set", **body})
    assert reply == {"ok": True, "tq": expected[0], "anti_thrash": expected[1]}
    assert await current(peer) == expected


@pytest.mark.parametrize("body, words", [
    ({"tq": 0}, "from 1 to 86400"),
    ({"tq": -5}, "from 1 to 86400"),
    ({"tq": 86401}, "from 1 to 86400"),
    ({"tq": 2.5}, "whole number"),
    ({"tq": True}, "whole number"),
    ({"tq": "30"}, "whole number"),
    ({"tq": None}, "whole number"),
    ({"anti_thrash": "sometimes"}, "on, off, auto"),
    ({"anti_thrash": "ON"}, "on, off, auto"),
    ({"anti_thrash": 1}, "on, off, auto"),
    ({"tq": 10, "anti_thrash": "bogus"}, "on, off, auto"),  # the valid tq is not applied either
    ({"tq": 0, "anti_thrash": "off"}, "from 1 to 86400"),
    ({}, "needs tq, anti_thrash or both"),
    ({"tq": 10, "colour": "red"}, "not colour"),
])
async def test_invalid_set_changes_nothing(inprocess_scheduler, body, words):
    peer = await control_peer(inprocess_scheduler)
    reply = await peer.control({"op": "set", **body})
    assert reply["ok"] is False and reply["code"] == "invalid"
    assert words in reply["error"] and "nothing was changed" in reply["error"]
    assert await current(peer) == (30, "on")


@pytest.mark.parametrize("body", [{"op": "reboot"}, {}, {"op": 1}])
async def test_unknown_operation_is_a_protocol_refusal_and_the_connection_stays(
        inprocess_scheduler, body):
    peer = await control_peer(inprocess_scheduler)
    reply = await peer.control(body)
    assert reply["ok"] is False and reply["code"] == "protocol" and "status" in reply["error"]
    assert (await peer.control({"op": "status"}))["ok"] is True


async def test_several_requests_on_one_connection_echo_their_sequence(inprocess_scheduler):
    peer = await control_peer(inprocess_scheduler)
    for tq in (3, 4, 5):
        assert (await peer.control({"op": "set", "tq": tq}))["tq"] == tq
    assert await current(peer) == (5, "on")


@pytest.mark.parametrize("body", [
    {"op": "set", "tq": "9" * 4000},
    {"op": "set", "anti_thrash": "x" * 60000},
    {"op": "set", **{f"key{i:05d}" + "k" * 100: 1 for i in range(400)}},
    {"op": "y" * 60000},
])
async def test_a_huge_refused_value_is_quoted_short(inprocess_scheduler, body):
    peer = await control_peer(inprocess_scheduler)
    reply = await peer.control(body)
    # The value is anyone's: the reply (and the log line that repeats it) stays short.
    assert reply["ok"] is False and len(reply["error"]) < 300, reply["error"]
    assert (await peer.control({"op": "status"}))["ok"] is True
