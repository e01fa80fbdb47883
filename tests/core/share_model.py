"""The share rule as the policy state machines model it (policy.py, "Shares"), for clients of
weight 1 without limits.

Each client's usage is kept from the grants and the ends of holds that the machine itself sees,
with usage.py's arithmetic (tested on its own); from it the model says where a waiter goes when
it asks, and which holders it has dropped after a minimum slice. A client that asked again
within QUICK_RETURN_S of letting the device go, QUICK_RETURNS times in a row, claims nothing
(throttle.py); what the core charged such a client for moves (`charged`, read from the core:
what moves cost is the core's arithmetic, tested on its own) weighs with its usage.
"""

from __future__ import annotations

from gemshare_nvs.core.rules.shares import clearly_under
from gemshare_nvs.core.rules.checks.throttle import QUICK_RETURN_S, QUICK_RETURNS
from gemshare_nvs.core.rules.usage import Usage


class ShareModel:
    def __init__(self, charged=lambda cid, device, now: 0.0) -> None:
        self.usage = Usage()
        self.charged = charged
        self.let_go: dict[tuple[int, int], bool] = {}  # (client, device) -> its last hold's end
        self.ended_at: dict[tuple[int, int], float] = {}
        self.quick: dict[tuple[int, int], int] = {}  # quick returns in a row

    def ended(self, cid: int, device: int, now: float, let_go: bool = False) -> None:
        """A hold ended: `let_go` when by the client's own release, not a drop or revocation."""
        self.usage.meter(cid, device).stop(now)
        self.let_go[(cid, device)] = let_go
        self.ended_at[(cid, device)] = now

    def asked(self, cid: int, device: int, now: float) -> None:
        """`cid` asks for a device it neither holds nor waits for."""
        key = (cid, device)
        back_at_once = self.let_go.get(key, False) and now - self.ended_at[key] < QUICK_RETURN_S
        self.quick[key] = self.quick.get(key, 0) + 1 if back_at_once else 0

    def throttled(self, cid: int, device: int) -> bool:
        return self.quick.get((cid, device), 0) >= QUICK_RETURNS

    def weighed(self, cid: int, device: int, now: float) -> float:
        return self.read(cid, device, now) + self.charged(cid, device, now)

    def granted(self, cid: int, device: int, now: float) -> None:
        self.usage.meter(cid, device).start(now)

    def forget(self, cid: int) -> None:
        self.usage.forget(cid)
        for table in (self.let_go, self.ended_at, self.quick):
            for key in [key for key in table if key[0] == cid]:
                del table[key]

    def read(self, cid: int, device: int, now: float) -> float:
        return self.usage.read(cid, device, now)

    def claimed(self, device: int, order: list[int], since: dict[int, float], now: float,
                tq: float, passed_before: set[int]) -> list[int]:
        """The queue once its last waiter, which has just asked and waits, has claimed its share:
        ahead of the waiters at the back that are clearly busier than it and, for one whose last
        hold it let go of itself, were not passed before in their wait, if each of them has
        waited less than a TQ."""
        *others, cid = order
        if self.throttled(cid, device):
            return order
        mine = self.weighed(cid, device, now)
        passed = []
        for other in reversed(others):
            once = other in passed_before and self.let_go.get((other, device), False)
            if once or not clearly_under(mine, self.weighed(other, device, now)):
                break
            passed.append(other)
        if not passed or any(now - since[other] >= tq for other in passed):
            return order
        place = others.index(passed[-1])
        return others[:place] + [cid] + others[place:]

    def preempted(self, device: int, cid: int, holders: list[int], now: float) -> list[int]:
        """The holders (not asked to drop) that a waiter now at the head is clearly under."""
        if self.throttled(cid, device):
            return []
        mine = self.weighed(cid, device, now)
        return [holder for holder in holders
                if clearly_under(mine, self.weighed(holder, device, now))]
