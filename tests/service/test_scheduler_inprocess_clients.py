"""Clients against the Trio server in the test's own process, over a real Unix socket."""

import logging

import trio
from trio_peer import Peer

from gemshare_nvs import protocol as p

DEADLINE = 10.0  # generous: only catches hangs


async def registered_peers(running, count: int, prefix: str = "peer") -> list[Peer]:
    peers = []
    for i in range(count):
        peer = await Peer.connect(running.socket)
        await peer.register(f"{prefix}{i}")
        peers.append(peer)
    return peers


async def test_many_concurrent_clients_never_hold_one_device_together(inprocess_scheduler):
    running = await inprocess_scheduler(tq=30)
    peers = await registered_peers(running, 40)
    holding = []
    overlaps = []
    rounds = 3

    async def work(peer: Peer) -> None:
        for _ in range(rounds):
            await peer.send(p.RequestLock(0))
            grant = await peer.recv()
            assert isinstance(grant, p.LockGranted), grant
            if holding:
                overlaps.append((holding[:], peer))
            holding.append(peer)
            await trio.sleep(0.001)
            holding.remove(peer)
            await peer.send(p.LockReleased(0, p.ReleaseReason.IDLE))

    with trio.fail_after(DEADLINE * 3):
        async with trio.open_nursery() as nursery:
            for peer in peers:
                nursery.start_soon(work, peer)
    assert overlaps == []
    status = await running.server.status()
    assert {c["state"] for c in status["clients"]} == {"idle"}
    assert len(status["clients"]) == 40
    assert sum(c["waits"] for c in status["clients"]) > 0  # they really contended


async def wait_for_waiters(running, count: int, device: int = 0) -> list[int]:
    """The device's waiters once `count` of them have reached the scheduler."""
    with trio.fail_after(DEADLINE):
        while True:
            devices = {d["index"]: d for d in (await running.server.status())["devices"]}
            if len(devices.get(device, {}).get("waiters", [])) == count:
                return devices[device]["waiters"]
            await trio.sleep(0.005)


async def test_waiters_are_granted_in_the_order_they_asked(inprocess_scheduler):
    running = await inprocess_scheduler()
    holder, *others = await registered_peers(running, 6)
    await holder.send(p.RequestLock(0))
    await holder.recv()
    asking = [others[i] for i in (3, 0, 4, 2, 1)]  # not the order they connected in
    for n, peer in enumerate(asking, 1):
        await peer.send(p.RequestLock(0))
        await wait_for_waiters(running, n)
    current = holder
    for peer in asking:
        await current.send(p.LockReleased(0, p.ReleaseReason.IDLE))
        assert await peer.recv() == p.LockGranted(0, p.GRANT_AFTER_WAIT, 30_000)
        current = peer


async def test_drop_then_release_hands_over_without_revocation(inprocess_scheduler):
    running = await inprocess_scheduler(tq=1, grace_ms=5000)
    first, second = await registered_peers(running, 2)
    await first.send(p.RequestLock(0))
    assert isinstance(await first.recv(), p.LockGranted)
    await second.send(p.RequestLock(0))
    assert await first.recv() == p.DropLock(0)
    await first.send(p.LockReleased(0, p.ReleaseReason.DROPPED))
    assert await second.recv() == p.LockGranted(0, p.GRANT_AFTER_WAIT, 1000)
    status = await running.server.status()
    assert [c["revocations"] for c in status["clients"]] == [0, 0]


async def test_unresponsive_holder_is_revoked_after_grace(inprocess_scheduler, caplog):
    caplog.set_level(logging.INFO, "gemshare.scheduler")
    running = await inprocess_scheduler(tq=1, grace_ms=200)
    silent, waiting = await registered_peers(running, 2, prefix="silent")
    await silent.send(p.RequestLock(0))
    await silent.recv()
    await waiting.send(p.RequestLock(0))
    assert await silent.recv() == p.DropLock(0)
    dropped = trio.current_time()
    assert await silent.recv() == p.LockRevoked(0)
    assert trio.current_time() - dropped >= 0.2 - 0.01  # never before the grace period
    assert await waiting.recv() == p.LockGranted(0, p.GRANT_AFTER_WAIT, 1000)
    status = await running.server.status()
    silent_status = next(c for c in status["clients"] if c["name"] == "silent0")
    assert (silent_status["revocations"], silent_status["revoked"]) == (1, True)
    assert "revoke client" in caplog.text and "silent0" in caplog.text


async def test_disconnected_holder_passes_the_lock_on_at_once(inprocess_scheduler):
    running = await inprocess_scheduler(tq=30)
    holder, waiter = await registered_peers(running, 2)
    await holder.send(p.RequestLock(0))
    await holder.recv()
    await waiter.send(p.RequestLock(0))
    await holder.aclose()
    assert await waiter.recv(timeout=DEADLINE) == p.LockGranted(0, p.GRANT_AFTER_WAIT, 30_000)


async def test_mode_and_tq_changes_reach_every_client(inprocess_scheduler):
    running = await inprocess_scheduler()
    peers = await registered_peers(running, 3)
    await peers[0].send(p.RequestLock(0))
    await peers[0].recv()
    await peers[1].send(p.RequestLock(0))
    control = await Peer.connect(running.socket)
    assert await control.control({"op": "set", "anti_thrash": "off", "tq": 9}) == \
        {"ok": True, "tq": 9, "anti_thrash": "off"}
    for peer in peers:
        assert await peer.recv() == p.SchedMode(p.Mode.OFF, 9)
    status = (await control.control({"op": "status"}))["status"]
    assert status["anti_thrash"] == "off" and status["tq"] == 9
    assert {c["state"] for c in status["clients"]} == {"idle"}
    await control.control({"op": "set", "anti_thrash": "on"})
    for peer in peers:
        assert await peer.recv() == p.SchedMode(p.Mode.ON, 9)
    await peers[2].send(p.RequestLock(0))
    assert await peers[2].recv() == p.LockGranted(0, 0, 9000)


async def test_client_that_never_reads_is_dropped_without_blocking_others(inprocess_scheduler,
                                                                          caplog):
    caplog.set_level(logging.WARNING, "gemshare.scheduler")
    running = await inprocess_scheduler(outgoing_queue=2)
    bulky = await registered_peers(running, 30, prefix="bulky-status-")  # big status replies
    reader_never = await Peer.connect(running.socket)
    request = p.encode(p.Control({"op": "status"}))

    async def flood() -> None:
        try:
            for _ in range(2000):
                await reader_never.send_raw(request)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the scheduler hung up on us: what this test wants

    with trio.fail_after(DEADLINE * 2):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flood)
            other = await Peer.connect(running.socket)
            await other.register("other")
            await other.send(p.RequestLock(0))
            assert isinstance(await other.recv(), p.LockGranted)
    assert "does not read (outgoing queue full" in caplog.text and "frames unsent" in caplog.text
    status = await running.server.status()
    assert status["connections"] == len(bulky) + 1  # and other's; the flooding one is gone


async def test_replies_that_fill_the_socket_arrive_whole_and_in_order(inprocess_scheduler):
    # Big status replies to a peer that starts reading late and keeps asking while it reads:
    # replies are written at once while the socket has room and queued while it is full, and
    # none may overtake a queued one or split it.
    running = await inprocess_scheduler()
    bulky = await registered_peers(running, 30, prefix="bulky-status-")  # kept connected
    slow = await Peer.connect(running.socket)
    sent, received = [], []

    async def ask() -> None:
        for _ in range(200):
            sent.append(await slow.send(p.Control({"op": "status"})))
            await trio.sleep(0.002)

    async def read_late() -> None:
        await trio.sleep(0.1)
        for _ in range(200):
            received.append(await slow.recv_with_seq())

    with trio.fail_after(DEADLINE * 2):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            nursery.start_soon(read_late)
    assert [seq for _, seq in received] == sent
    assert all(isinstance(reply, p.ControlReply) and reply.body["ok"]
               and len(reply.body["status"]["clients"]) == len(bulky) for reply, _ in received)


async def test_partial_frame_then_silence_stalls_nobody(inprocess_scheduler):
    running = await inprocess_scheduler()
    half_header = await Peer.connect(running.socket)
    await half_header.send_raw(p.encode(p.Register(0, 0, "stuck"))[:9])
    half_payload = await Peer.connect(running.socket)
    await half_payload.send_raw(p.encode(p.Register(0, 0, "stuck"))[:100])
    with trio.fail_after(DEADLINE):
        peer, = await registered_peers(running, 1)
        await peer.send(p.RequestLock(0))
        assert isinstance(await peer.recv(), p.LockGranted)
        control = await Peer.connect(running.socket)
        assert (await control.control({"op": "status"}))["ok"] is True


async def test_client_limit_refuses_with_too_many_clients(inprocess_scheduler):
    running = await inprocess_scheduler(max_clients=2)
    first_two = await registered_peers(running, 2)
    third = await Peer.connect(running.socket)
    await third.send(p.Register(0, 0, "third"))
    error, = await third.closed_after()
    assert error.code == p.ErrorCode.TOO_MANY_CLIENTS and "max-clients" in error.text
    control = await Peer.connect(running.socket)  # status still answers when full
    status = (await control.control({"op": "status"}))["status"]
    assert len(status["clients"]) == len(first_two)


async def test_memory_reports_show_in_status(inprocess_scheduler):
    running = await inprocess_scheduler()
    peer, = await registered_peers(running, 1)
    await peer.send(p.MemReport(0, 0, 123_456, 80 << 30))
    control = await Peer.connect(running.socket)
    with trio.fail_after(DEADLINE):
        while True:
            status = (await control.control({"op": "status"}))["status"]
            if status["clients"][0]["allocated_bytes"]:
                break
            await trio.sleep(0.01)
    assert status["clients"][0]["allocated_bytes"] == 123_456


async def test_silent_connection_is_closed_after_the_first_frame_deadline(inprocess_scheduler):
    running = await inprocess_scheduler(first_frame_seconds=0.2)
    silent = await Peer.connect(running.socket)
    half = await Peer.connect(running.socket)
    await half.send_raw(p.encode(p.Control({"op": "status"}))[:10])
    client, = await registered_peers(running, 1)
    for peer in (silent, half):
        error, = await peer.closed_after()
        assert error.code == p.ErrorCode.PROTOCOL and "no REGISTER or CONTROL" in error.text
    await trio.sleep(0.3)  # a registered client has no such deadline
    await client.send(p.RequestLock(0))
    assert isinstance(await client.recv(), p.LockGranted)


async def test_connections_beyond_the_ceiling_are_refused(inprocess_scheduler):
    running = await inprocess_scheduler(max_clients=1)
    ceiling = running.server.max_connections
    idle = [await Peer.connect(running.socket) for _ in range(ceiling)]
    with trio.fail_after(DEADLINE):
        while (await running.server.status())["connections"] < ceiling:
            await trio.sleep(0.005)
    extra = await Peer.connect(running.socket)
    error, = await extra.closed_after()
    assert error.code == p.ErrorCode.TOO_MANY_CLIENTS
    await idle.pop().aclose()
    with trio.fail_after(DEADLINE):
        while (await running.server.status())["connections"] >= ceiling:
            await trio.sleep(0.005)
    control = await Peer.connect(running.socket)
    assert (await control.control({"op": "status"}))["ok"] is True
