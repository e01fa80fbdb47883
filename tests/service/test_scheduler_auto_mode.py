"""Mode `auto` over a real Unix socket: clients whose reported memory fits hold the lock
together; clients that do not fit take turns by time quantum; growth sends the younger away."""

import trio
from trio_peer import Peer

from gemshare_nvs import protocol as p
from gemshare_nvs.protocol import Mode

G = 1 << 30
DEADLINE = 10.0  # generous: only catches hangs


async def client(running, name: str, allocated: int, total: int = 8 * G) -> Peer:
    """A registered client that has reported its memory; frames on one connection keep their
    order, so the report is known before any request that follows it."""
    peer = await Peer.connect(running.socket)
    await peer.register(name)
    await peer.send(p.MemReport(0, 0, allocated, total))
    return peer


async def grant_to(peer: Peer) -> p.LockGranted:
    await peer.send(p.RequestLock(0))
    grant = await peer.recv()
    assert isinstance(grant, p.LockGranted), grant
    return grant


async def device_status(running) -> dict:
    device, = (await running.server.status())["devices"]
    return device


async def test_two_clients_that_fit_hold_the_device_at_once(inprocess_scheduler):
    running = await inprocess_scheduler(mode=Mode.AUTO, context_reserve_mib=256)
    first = await client(running, "small-a", 2 * G)
    second = await client(running, "small-b", 3 * G)
    assert await grant_to(first) == p.LockGranted(0, 0, 30_000)
    assert await grant_to(second) == p.LockGranted(0, p.GRANT_SHARED, 30_000)
    device = await device_status(running)
    assert len(device["holders"]) == 2 and device["waiters"] == []
    assert (device["capacity_bytes"], device["capacity_source"]) == (8 * G, "reported")
    assert device["context_reserve_bytes"] == 256 << 20
    assert device["holders_allocated_bytes"] == 5 * G


async def recv_lock_message(peer: Peer):
    """The next message about the lock, past the idle-release advice that may come first."""
    while isinstance(message := await peer.recv(), p.IdleHint):
        pass
    return message


async def test_two_clients_that_do_not_fit_take_turns_moving_only_the_room_needed(
        inprocess_scheduler):
    running = await inprocess_scheduler(mode=Mode.AUTO, tq=1, grace_ms=5000)
    first = await client(running, "big-a", 5 * G)
    second = await client(running, "big-b", 5 * G)
    holder, waiter = first, second
    assert await grant_to(holder) == p.LockGranted(0, 0, 1000)
    await waiter.send(p.RequestLock(0))
    # 5 + 5 GiB and the next holder's 512 MiB reserve on 8 GiB: 2.5 GiB over, plus the margin.
    room = 2 * G + (512 << 20) + (256 << 20)
    flags = p.GRANT_AFTER_WAIT  # the first turn: nobody else ran before the waiter
    for _ in range(3):  # each turn: the quantum ends, the holder hands over and asks again
        with trio.fail_after(DEADLINE):
            assert await recv_lock_message(holder) == p.DropLock(0, 0, room)
            device = await device_status(running)
            assert len(device["holders"]) == 1 and len(device["waiters"]) == 1
            await holder.send(p.Moved(0, p.MOVED_TO_HOST, room // 2, 200_000))  # progress
            await holder.send(p.Moved(0, p.MOVED_TO_HOST | p.MOVED_DONE, room, 400_000))
            await holder.send(p.LockReleased(0, p.ReleaseReason.DROPPED))
            assert await recv_lock_message(waiter) == p.LockGranted(0, flags, 1000)
            await waiter.send(p.Moved(0, p.MOVED_DONE, room, 100_000))  # its memory is back
            await holder.send(p.RequestLock(0))
        holder, waiter = waiter, holder
        flags = p.GRANT_AFTER_WAIT | p.GRANT_OTHERS_RAN
    status = await running.server.status()
    assert [c["revocations"] for c in status["clients"]] == [0, 0]
    device, = status["devices"]
    assert device["moves"]["to_host"] == {"count": 3, "bytes": 3 * room, "seconds": 1.2}
    assert device["move_rates"]["to_host_gbps"] == round(room / 0.4 / 1e9, 2)
    # The one holding has all of its memory there, the other what it did not move.
    assert sorted(c["resident_bytes"] for c in status["clients"]) == [5 * G - room, 5 * G]


async def test_a_holder_that_grows_sends_the_younger_one_to_the_back(inprocess_scheduler):
    running = await inprocess_scheduler(mode=Mode.AUTO, context_reserve_mib=0)
    older = await client(running, "grows", 2 * G)
    younger = await client(running, "steady", 2 * G)
    await grant_to(older)
    assert (await grant_to(younger)).flags == p.GRANT_SHARED
    await older.send(p.MemReport(0, 0, 7 * G, 8 * G))  # 7 + 2 > 8
    # 7 + 2 GiB (no reserve here) on 8 GiB: 1 GiB over, plus the margin, is the younger's to move.
    assert await younger.recv() == p.DropLock(0, 0, 1 * G + (256 << 20))
    await younger.send(p.LockReleased(0, p.ReleaseReason.DROPPED))
    await younger.send(p.RequestLock(0))
    with trio.fail_after(DEADLINE):
        while len((device := await device_status(running))["waiters"]) != 1:
            await trio.sleep(0.005)
    assert device["holders_allocated_bytes"] == 7 * G and len(device["holders"]) == 1
    await older.send(p.MemReport(0, 0, 1 * G, 8 * G))  # room again: the waiter comes back in
    assert await younger.recv() == p.LockGranted(0, p.GRANT_AFTER_WAIT | p.GRANT_SHARED, 30_000)


async def test_switching_auto_to_on_drops_all_but_the_oldest(inprocess_scheduler):
    running = await inprocess_scheduler(mode=Mode.AUTO)
    peers = [await client(running, f"p{i}", 1 * G) for i in range(3)]
    for peer in peers:
        await grant_to(peer)
    control = await Peer.connect(running.socket)
    assert (await control.control({"op": "set", "anti_thrash": "on"}))["ok"] is True
    assert await peers[0].recv() == p.SchedMode(Mode.ON, 30)
    for peer in peers[1:]:
        assert await peer.recv() == p.SchedMode(Mode.ON, 30)
        assert await peer.recv() == p.DropLock(0)
    device = await device_status(running)
    assert len(device["holders"]) == 3 and len(device["dropping"]) == 2
