"""Where the scheduler believes each client's memory is: bytes on each device, per client.

An estimate built from what the clients report (allocations, and moves to the host) and from the
lock (a holder brings all of its memory back). It never goes below 0 nor above what the client
has allocated, whatever a client claims, so a client that lies about its moves can skew only its
own figure, never the sums of others.
"""

from __future__ import annotations

from .capacity import renumbered


class Residency:
    def __init__(self) -> None:
        self._devices: dict[int, dict[int, int]] = {}  # device -> client -> bytes there
        self._presumed: dict[tuple[int, int], int] = {}  # (device, client) -> bytes taken as gone

    def of(self, device: int, cid: int) -> int:
        return self._devices.get(device, {}).get(cid, 0)

    def total(self, device: int) -> int:
        return sum(self._devices.get(device, {}).values())

    def on(self, device: int) -> dict[int, int]:
        """Clients with memory on the device, and how much."""
        return dict(self._devices.get(device, {}))

    def set(self, device: int, cid: int, size: int) -> None:
        if size >= self.of(device, cid):  # it ran again: what was presumed gone is back
            self._presumed.pop((device, cid), None)
        clients = self._devices.setdefault(device, {})
        if size > 0:
            clients[cid] = size
        else:
            clients.pop(cid, None)
            if not clients:
                del self._devices[device]

    def shrink_to(self, device: int, cid: int, allocated: int) -> None:
        """A client freed memory: what is left of it there is at most what it still has."""
        self.set(device, cid, min(self.of(device, cid), allocated))

    def moved_out(self, device: int, cid: int, size: int) -> int:
        """A client moved `size` bytes to the host; returns the bytes believed, at most its own.
        Bytes already presumed gone (below) are not taken twice."""
        key = (device, cid)
        presumed = min(self._presumed.pop(key, 0), size)
        believed = min(max(size - presumed, 0), self.of(device, cid))
        self.set(device, cid, self.of(device, cid) - believed)
        return believed

    def presume_gone(self, device: int, cid: int, size: int) -> None:
        """Bytes a client was asked to move and did not confirm: the driver's page faults will
        push them out for whoever runs next, so they count as gone; a late report of the same
        move is not counted again."""
        taken = min(size, self.of(device, cid))
        self.set(device, cid, self.of(device, cid) - taken)
        self._presumed[(device, cid)] = self._presumed.get((device, cid), 0) + taken

    def renumber(self, cid: int, moves: dict[int, int | None]) -> None:
        """The client's devices are known by other numbers now (old -> new; None: unknown)."""
        mine = {device: clients[cid] for device, clients in self._devices.items() if cid in clients}
        self.forget(cid)
        for device, size in renumbered(mine, moves).items():
            self.set(device, cid, size)

    def forget(self, cid: int) -> None:
        for device in [d for d, clients in self._devices.items() if cid in clients]:
            self.set(device, cid, 0)
        for key in [key for key in self._presumed if key[1] == cid]:
            del self._presumed[key]


def take(needed: int, candidates: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Of the candidates (client, resident bytes), in the order given, how many bytes to ask of
    each so that `needed` bytes leave; fewer when they do not hold enough between them."""
    plan = []
    for cid, size in candidates:
        if needed <= 0:
            break
        part = min(size, needed)
        if part > 0:
            plan.append((cid, part))
            needed -= part
    return plan


def eviction_order(resident: dict[int, int], waiting: list[int]) -> list[tuple[int, int]]:
    """The clients (id, resident bytes) in the order they are asked to move memory out: those not
    in `waiting` (the device's queue, first come first) before those in it, the last in the queue
    first as it runs last; largest first within each."""
    place = {cid: i for i, cid in enumerate(waiting)}  # not waiting: ahead of them all
    return sorted(resident.items(), key=lambda item: (-place.get(item[0], len(place)), -item[1]))
