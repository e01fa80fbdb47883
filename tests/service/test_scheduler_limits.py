"""The scheduler's bounds (docs/protocol.md, "Limits"): what one local user can make it hold or
build is bounded, and crossing a bound costs that connection only, with a logged reason."""

import logging

import trio
from trio_peer import Peer

from gemshare_nvs import protocol as p
from gemshare_nvs.config.settings import (
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_OUTGOING_BYTES,
)
from gemshare_nvs.core.model.device_identity import MAX_DEVICES, MAX_DEVICES_PER_CLIENT

DEADLINE = 30.0  # only catches hangs
WIDE = "\U0001f600"  # four bytes of UTF-8, twelve of escaped JSON: the widest a name gets
CROWD = 700  # clients whose status, per-device breakdowns left out, is still over one frame


async def test_status_still_answers_when_clients_report_every_device(inprocess_scheduler):
    running = await inprocess_scheduler()
    peers = []
    with trio.fail_after(DEADLINE * 2):
        for i in range(CROWD):
            first = i * MAX_DEVICES_PER_CLIENT % MAX_DEVICES
            peer = await Peer.connect(running.socket)
            await peer.send(p.Register(first, 0, WIDE * 16, WIDE * 16, WIDE * 64))
            await peer.send_raw(b"".join(
                p.encode(p.MemReport((first + k) % MAX_DEVICES, 0, 2**64 - 1, 2**64 - 1))
                for k in range(MAX_DEVICES_PER_CLIENT)))
            peers.append(peer)
        clients = running.server.policy.clients
        while len(clients) < len(peers) or \
                any(len(c.allocated) < MAX_DEVICES_PER_CLIENT for c in clients.values()):
            await trio.sleep(0.05)
        control = await Peer.connect(running.socket)
        reply = await control.control({"op": "status"})
    assert reply["ok"] is True
    status = reply["status"]
    assert status["truncated"]["allocated_by_device_omitted"] is True
    assert status["truncated"]["clients_omitted"] > 0  # the newest, so the oldest are shown
    assert [c["id"] for c in status["clients"]] == \
        sorted(running.server.policy.clients)[:len(status["clients"])]
    assert status["truncated"]["clients_omitted"] + len(status["clients"]) == len(peers)
    assert len(status["devices"]) + status["truncated"]["devices_omitted"] == MAX_DEVICES
    assert (await control.control({"op": "set", "tq": 7}))["ok"] is True  # control still works


async def test_naming_one_device_too_many_closes_that_client(inprocess_scheduler, caplog):
    caplog.set_level(logging.INFO, "gemshare.scheduler")
    running = await inprocess_scheduler()
    greedy = await Peer.connect(running.socket)
    await greedy.register("greedy")
    await greedy.send_raw(b"".join(p.encode(p.MemReport(d, 0, 1, 0))
                                   for d in range(MAX_DEVICES_PER_CLIENT + 1)))
    messages = await greedy.closed_after()
    assert [(m.code, "one too many" in m.text) for m in messages] == [(p.ErrorCode.PROTOCOL,
                                                                       True)]
    assert f"at most {MAX_DEVICES_PER_CLIENT} distinct devices" in caplog.text
    assert running.server.policy.clients == {}


async def bulky_clients(running, count: int) -> list[Peer]:
    peers = []
    for i in range(count):
        peer = await Peer.connect(running.socket)
        await peer.register(f"bulky-{i}-" + "x" * 50)
        peers.append(peer)
    return peers


async def test_control_connection_that_never_reads_is_dropped_by_its_bytes(inprocess_scheduler,
                                                                           caplog):
    caplog.set_level(logging.WARNING, "gemshare.scheduler")
    running = await inprocess_scheduler()
    bulky = await bulky_clients(running, 40)  # a status reply of some 25 KiB
    never_reads = await Peer.connect(running.socket)
    request = p.encode(p.Control({"op": "status"}))
    frames = []

    async def flood() -> None:
        try:
            for _ in range(5000):
                await never_reads.send_raw(request)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the scheduler hung up: what this test wants

    async def watch() -> None:
        conn = None
        while conn is None or conn.id in running.server.conns:
            conn = conn or max(running.server.conns.values(), key=lambda c: c.id)
            frames.append(conn.queued)
            await trio.sleep(0)

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flood)
            await trio.sleep(0.01)
            nursery.start_soon(watch)
            served = await Peer.connect(running.socket)  # others keep being served meanwhile
            await served.register("served")
            await served.send(p.RequestLock(0))
            assert isinstance(await served.recv(), p.LockGranted)
            assert (await (await Peer.connect(running.socket)).control({"op": "status"}))["ok"]
    assert f"over the {DEFAULT_OUTGOING_BYTES}-byte limit" in caplog.text
    assert "does not read" in caplog.text
    assert max(frames) < 256  # the byte bound, not the frame count, stopped it
    with trio.fail_after(DEADLINE):  # until the scheduler has seen the status peer hang up
        while len(running.server.conns) > len(bulky) + 1:
            await trio.sleep(0.01)
    assert len(running.server.conns) == len(bulky) + 1


async def test_incoming_frame_over_the_request_limit_is_refused_unread(inprocess_scheduler,
                                                                        caplog):
    caplog.set_level(logging.INFO, "gemshare.scheduler")
    running = await inprocess_scheduler()
    big = DEFAULT_MAX_REQUEST_BYTES + 1
    assert big < p.MAX_PAYLOAD  # a frame the protocol allows, but no request is this big
    peer = await Peer.connect(running.socket)
    await peer.send_raw(p.HEADER.pack(p.MAGIC, p.VERSION, p.MsgType.CONTROL, big, 1))
    error, = await peer.closed_after()  # without sending one byte of the payload
    assert error.code == p.ErrorCode.PROTOCOL
    assert f"CONTROL frame of {big} bytes exceeds the {DEFAULT_MAX_REQUEST_BYTES}-byte limit" \
        in error.text
    assert error.text in caplog.text
    fits = b'{"op":"status"}'.ljust(DEFAULT_MAX_REQUEST_BYTES)  # padded with JSON blanks
    ok = await Peer.connect(running.socket)
    await ok.send_raw(p.HEADER.pack(p.MAGIC, p.VERSION, p.MsgType.CONTROL, len(fits), 5) + fits)
    reply, seq = await ok.recv_with_seq()
    assert seq == 5 and reply.body["ok"] is True
