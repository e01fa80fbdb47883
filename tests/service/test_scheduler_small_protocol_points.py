"""Frames that break the protocol's bounds are refused as docs/protocol.md says, and a memory
report is believed only within what a device can hold (docs/security.md): an unknown REGISTER
flag bit, a LOCK_RELEASED past the last device, a device total of 2^64 - 1."""

import logging

import trio
from trio_peer import Peer

from gemshare_nvs import protocol as p
from gemshare_nvs.core.model.device_identity import MAX_DEVICES
from gemshare_nvs.core.rules.capacity import MAX_REPORTED_TOTAL

DEADLINE = 30.0  # only catches hangs
GIB = 1 << 30
HUGE = 2**64 - 1


async def status_of(running) -> dict:
    control = await Peer.connect(running.socket)
    reply = await control.control({"op": "status"})
    await control.aclose()
    return reply["status"]


async def test_a_register_with_a_flag_bit_the_scheduler_does_not_know_is_refused(
        inprocess_scheduler):
    running = await inprocess_scheduler()
    peer = await Peer.connect(running.socket)
    await peer.send(p.Register(0, p.REG_NO_MPS | 1 << 9, "newer"))
    messages = await peer.closed_after()
    assert [m.code for m in messages] == [p.ErrorCode.PROTOCOL]
    assert "REGISTER flags 0x202 have bits this scheduler does not know (0x200" in \
        messages[0].text
    assert running.server.policy.clients == {}


async def test_the_known_flags_still_register(inprocess_scheduler):
    running = await inprocess_scheduler()
    peer = await Peer.connect(running.socket)
    await peer.send(p.Register(0, p.REG_UNIFIED_MEMORY | p.REG_NO_MPS, "known"))
    assert isinstance(await peer.recv(), p.Registered)


async def test_a_release_of_a_device_past_the_last_is_a_protocol_error(inprocess_scheduler):
    running = await inprocess_scheduler()
    peer = await Peer.connect(running.socket)
    await peer.register("releaser")
    await peer.send(p.LockReleased(MAX_DEVICES, p.ReleaseReason.IDLE))
    messages = await peer.closed_after()
    assert [(m.code, f"device index {MAX_DEVICES} is out of range" in m.text)
            for m in messages] == [(p.ErrorCode.PROTOCOL, True)]
    assert running.server.policy.clients == {}


async def test_a_device_total_of_two_to_the_sixty_four_is_nobodys_capacity(inprocess_scheduler,
                                                                          caplog):
    caplog.set_level(logging.WARNING, "gemshare.scheduler")
    running = await inprocess_scheduler()  # no NVML: the reports are all there is
    liar, honest = await Peer.connect(running.socket), await Peer.connect(running.socket)
    with trio.fail_after(DEADLINE):
        await liar.register("liar")
        await honest.register("honest")
        for _ in range(3):  # said again and again, warned of once
            await liar.send(p.MemReport(0, 0, HUGE, HUGE))
        await honest.send(p.MemReport(0, 0, 1 * GIB, 8 * GIB))
        while len(running.server.policy.clients[2].allocated) < 1:
            await trio.sleep(0.02)
        status = await status_of(running)
    device, = status["devices"]
    assert (device["capacity_bytes"], device["capacity_source"]) == (8 * GIB, "reported")
    allocated = {client["name"]: client["allocated_bytes"] for client in status["clients"]}
    # Without NVML, the liar's count is believed up to the most any GPU holds.
    assert allocated == {"liar": MAX_REPORTED_TOTAL, "honest": 1 * GIB}
    assert caplog.text.count("not believed") == 1
