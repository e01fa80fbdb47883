"""Which connections the metrics server serves at once, and which one makes room for a new one.

At most `total` connections, and `per_peer` from one address. When a new connection finds no
room, the oldest one still sending its request (among the same address's when that is what is
full) is dropped for it: a scraper sends its request as soon as it connects, so the ones that
linger are peers holding slots, and they cannot keep a scraper out by connecting first. Only
when every slot in the way is answering a request is the new connection turned away.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import trio


@dataclass(eq=False)
class Scrape:
    peer: str  # its address
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)  # cancelled to drop it
    reading: bool = True  # still sending its request: it may be dropped for a newcomer


class ScrapeSlots:
    def __init__(self, total: int, per_peer: int):
        self.total = total
        self.per_peer = per_peer
        self._held: list[Scrape] = []  # oldest first

    def admit(self, peer: str) -> Scrape | None:
        """The slot of a new connection from `peer`, another dropped to make room if need be;
        None when there is no room."""
        mine = [scrape for scrape in self._held if scrape.peer == peer]
        if len(mine) >= self.per_peer and not self._drop_oldest_reading(mine):
            return None
        if len(self._held) >= self.total and not self._drop_oldest_reading(self._held):
            return None
        scrape = Scrape(peer)
        self._held.append(scrape)
        return scrape

    def release(self, scrape: Scrape) -> None:
        if scrape in self._held:
            self._held.remove(scrape)

    def _drop_oldest_reading(self, among: list[Scrape]) -> bool:
        oldest = next((scrape for scrape in among if scrape.reading), None)
        if oldest is None:
            return False
        oldest.reading = False  # no longer answered, even if its request comes meanwhile
        oldest.scope.cancel()
        self._held.remove(oldest)
        return True

    def __len__(self) -> int:
        return len(self._held)
