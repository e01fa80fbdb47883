"""Which bytes of a reported move may teach the scheduler a rate: only those it asked for.

Clients report the size and the time of their moves themselves. Their sizes are believed, up to
what they have, for where their memory is (residency.py); but the rates set every client's
deadlines and idle hints, so there only moves the policy asked for count: to the host, what a
drop or an eviction asked of the client and no earlier report covered; to the device, what it had
off the device when it was granted. A client that is never asked to move teaches no rate, and one
that reports more than it was asked teaches one from no more than that.
"""

from __future__ import annotations


class MoveCredit:
    def __init__(self) -> None:
        self._out: dict[tuple[int, int], int] = {}  # (device, client) -> asked to the host
        self._back: dict[tuple[int, int], int] = {}  # (device, client) -> off the device at grant

    def asked_out(self, device: int, cid: int, size: int) -> None:
        """The client was asked to move `size` bytes to the host."""
        if size > 0:
            self._out[(device, cid)] = self._out.get((device, cid), 0) + size

    def granted(self, device: int, cid: int, off_device: int) -> None:
        """The client holds the device again with `off_device` bytes to bring back: what it was
        asked to move out before is settled, reported or not."""
        self._out.pop((device, cid), None)
        if off_device > 0:
            self._back[(device, cid)] = off_device
        else:
            self._back.pop((device, cid), None)

    def counted(self, device: int, cid: int, to_host: bool, size: int) -> int:
        """Of a move of `size` bytes the client reports done, the bytes that may teach a rate;
        they are used up."""
        owed = self._out if to_host else self._back
        key = (device, cid)
        counted = min(max(size, 0), owed.get(key, 0))
        if counted > 0:
            owed[key] -= counted
            if owed[key] == 0:
                del owed[key]
        return counted

    def forget(self, cid: int) -> None:
        for owed in (self._out, self._back):
            for key in [key for key in owed if key[1] == cid]:
                del owed[key]
