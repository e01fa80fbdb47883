"""A budget of new connections per user, checked as each is accepted.

A local user who connects and hangs up in a loop makes thousands of connections a second. Each
one the scheduler serves costs a task, a credentials look-up and the first-frame wait; enough of
them fill the listen queue, and then nobody else can connect. So every uid but root may open
`burst` connections at once and then `rate` a second on average (a token bucket); the
connections past that are closed as they are accepted, before they cost anything more: the first
`told` of them since the last report with one ERROR frame that says why (a program that met the
limit by mistake can tell), the rest without a word, which costs the scheduler a quarter less.
They are counted, and `report` says how many per user.

The burst is large enough for every program of one user to connect again at once (after a
restart of the scheduler): twice the per-user client cap, as fair_slots.py lets a user hold that
many clients and as many connections that have not registered yet.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .log_rate import TokenBucket

ROOT = 0
RATE = 50.0  # new connections a second, on average, for one uid past its burst
MIN_BURST = 64
TOLD = 64  # connections closed with a word of why, per user and report


@dataclass
class _User:
    bucket: TokenBucket
    closed: int = 0  # connections closed since the last report
    told: bool = False  # whether the log has said that this user is over its rate


class ConnectRate:
    def __init__(self, burst: int, rate: float = RATE, clock=time.monotonic):
        self.burst = max(MIN_BURST, burst)
        self.rate = rate
        self.clock = clock
        self._users: dict[int, _User] = {}

    @classmethod
    def for_clients_per_user(cls, clients_per_user: int, **options) -> ConnectRate:
        return cls(2 * clients_per_user, **options)

    def admit(self, uid: int) -> bool:
        """Whether a connection of `uid`, accepted now, may be served; counted if not (then
        `told` says whether it is worth a word)."""
        if uid == ROOT:
            return True
        now = self.clock()
        user = self._users.get(uid)
        if user is None:
            user = self._users[uid] = _User(TokenBucket.full(self.burst, self.rate, now))
        if user.bucket.take(now):
            return True
        user.closed += 1
        return False

    def told(self, uid: int) -> bool:
        """Whether the connection of `uid` just closed is among the first TOLD since the last
        report, which are told why."""
        return self._users[uid].closed <= TOLD

    def first_closed(self, uid: int) -> bool:
        """Whether the connection of `uid` just closed is the first since the user was last
        within its rate: the one worth a line of its own."""
        user = self._users[uid]
        told, user.told = user.told, True
        return not told

    def report(self) -> dict[int, int]:
        """How many connections each user had closed since the last report; users whose budget
        is whole again are forgotten (and told again if they come back), so the table stays
        small."""
        now = self.clock()
        closed = {}
        for uid, user in list(self._users.items()):
            if user.closed:
                closed[uid], user.closed = user.closed, 0
            elif user.bucket.whole(now):
                del self._users[uid]
        return closed

    def words(self) -> str:
        return f"{self.burst} at once, then {self.rate:g} a second"
