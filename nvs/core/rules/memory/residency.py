"""Where the scheduler believes each client's memory is: bytes on each device, per client.

An estimate built from what the clients report (allocations, and moves to the host) and from the
lock (a holder brings back all it moved off, but for what it says it left on the host). It never
goes below 0 nor above what the client has allocated, whatever a client claims, so a client that
lies about its moves can skew only its own figure, never the sums of others.
"""

from __future__ import annotations

from ..capacity import renumbered


class Residency:
    def __init__(self) -> None:
        self._devices: dict[int, dict[int, int]] = {}  # device -> client -> bytes there
        self._presumed: dict[tuple[int, int], int] = {}  # (device, client) -> bytes taken as gone
        # (device, client) -> bytes it said it moved to the host since it last held the device:
        # what it brings back, and reports, at its next grant
        self._moved_out: dict[tuple[int, int], int] = {}
        # (device, client) -> bytes it moved off and said it left on the host when it ran again
        # (libnvs's cold memory): not on the device while it runs, until it says otherwise
        self._on_host: dict[tuple[int, int], int] = {}

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
        if believed > 0:
            self._moved_out[key] = self._moved_out.get(key, 0) + believed
        return believed

    def moved_off(self, device: int, cid: int) -> int:
        """What the client moved to the host itself since it last held the device: it brings
        that back before it runs, and says when it is back (MOVED)."""
        return self._moved_out.get((device, cid), 0)

    def brought_back(self, device: int, cid: int) -> int:
        """The client holds the device again and brings back what it moved off itself
        (moved_off), which is returned and forgotten."""
        return self._moved_out.pop((device, cid), 0)

    def left_on_host(self, device: int, cid: int) -> int:
        """What the client said it left on the host when it last ran: no room for it is needed
        when it runs again."""
        return self._on_host.get((device, cid), 0)

    def running(self, device: int, cid: int, allocated: int) -> None:
        """The client runs on the device: all its memory is there but what it left on the host."""
        self.set(device, cid, allocated - min(self.left_on_host(device, cid), allocated))

    def came_back(self, device: int, cid: int, moved_off: int, size: int,
                  allocated: int) -> None:
        """A holder that had moved `moved_off` bytes off says `size` came back: the rest stays
        on the host while it runs."""
        key = (device, cid)
        left = self._on_host.get(key, 0) + max(moved_off - size, 0)
        if left > 0:
            self._on_host[key] = min(left, allocated)
        self.running(device, cid, allocated)

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
        self.forget(cid)  # what it left on the host too: believed all back, as before it said
        for device, size in renumbered(mine, moves).items():
            self.set(device, cid, size)

    def forget(self, cid: int) -> None:
        for device in [d for d, clients in self._devices.items() if cid in clients]:
            self.set(device, cid, 0)
        for table in (self._presumed, self._moved_out, self._on_host):
            for key in [key for key in table if key[1] == cid]:
                del table[key]


PAGE = 2 << 20  # moves go in 2 MiB pages


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


def even_out(needed: int, candidates: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """`needed` bytes asked of the candidates (client, resident bytes, allocated bytes) so that
    what each is missing from the device afterwards comes out as even as their memory allows:
    those missing least give first, down to the level of the next, in whole pages; the first in
    order makes up what rounding leaves. Among programs that take turns, the one that ran last
    (with all of its memory there) gives most, and each one's return brings back about the same
    part of its memory, never the whole of it for one and nothing for another."""
    have = {cid: max(resident, 0) for cid, resident, _ in candidates}
    missing = {cid: max(allocated - resident, 0) for cid, resident, allocated in candidates}
    total = sum(have.values())
    if needed <= 0 or total <= 0:
        return []
    if needed >= total:
        return [(cid, size) for cid, size in have.items() if size > 0]

    def given(level: int) -> dict[int, int]:
        return {cid: min(max(level - missing[cid], 0), have[cid]) for cid in have}

    low, high = 0, max(missing[cid] + have[cid] for cid in have)  # the level all of it goes at
    while low < high:  # the lowest level at which they give enough
        middle = (low + high) // 2
        if sum(given(middle).values()) >= needed:
            high = middle
        else:
            low = middle + 1
    shares = {cid: size // PAGE * PAGE for cid, size in given(low).items()}
    short = needed - sum(shares.values())
    for cid, _, _ in candidates:  # what rounding down left, from the first in order
        extra = max(min(have[cid] - shares[cid], short), 0)
        shares[cid] += extra
        short -= extra
    return [(cid, shares[cid]) for cid, _, _ in candidates if shares[cid] > 0]


def eviction_plan(needed: int, resident: dict[int, int], waiting: list[int],
                  rank: dict[int, tuple], allocated: dict[int, int]) -> list[tuple[int, int]]:
    """Who moves how much out so that `needed` bytes leave a device, of the clients with memory
    there (`resident`, none of them holding it; `allocated`, what each has in all): first those
    idle past their pattern (rank (0, ...): gaps.eviction_rank), the longest idle first (the
    largest first among equals), each with all it has; then the other idle ones, evening out
    what each misses (even_out); last the waiters (`waiting`, the device's queue first come
    first), from the back of the queue as it runs last. Fewer bytes when they do not hold enough
    between them."""
    place = {cid: i for i, cid in enumerate(waiting)}
    idle = sorted((cid for cid in resident if cid not in place),
                  key=lambda cid: (rank.get(cid, ()), -resident[cid]))
    stale = [(cid, resident[cid]) for cid in idle if rank.get(cid, (0,))[0] == 0]
    fresh = [(cid, resident[cid]) for cid in idle if rank.get(cid, (0,))[0] != 0]
    queued = sorted(((cid, resident[cid]) for cid in place if cid in resident),
                    key=lambda item: -place[item[0]])
    plan = take(needed, stale)
    needed -= sum(size for _, size in plan)
    from_fresh = even_out(needed, [(cid, size, max(allocated.get(cid, 0), size))
                                   for cid, size in fresh])
    needed -= sum(size for _, size in from_fresh)
    return plan + from_fresh + take(needed, queued)
