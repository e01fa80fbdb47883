"""What the policy core remembers between events: its clients, and each device's lock.

Plain records; policy.py's rules change them, snapshot.py reads them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field

from .container import NAMED_BY_PROGRAM, NodeIdentity
from .decision import Decision
from .device_identity import Numbering
from .terms import Identity, Terms


@dataclass(frozen=True)
class Registration:
    """Who a client is, from its REGISTER and its connection (its pod, namespace and container
    from the node when the node says): fixed while it stays."""
    id: int
    pid: int
    uid: int
    gid: int
    name: str
    namespace: str
    pod: str
    flags: int  # REG_* flags
    connected_since: float  # wall-clock (Unix) time, given by the shell
    container: str = ""  # its Kubernetes container's name, from the node; "" when unknown


@dataclass
class Client:
    registration: Registration
    numbering: Numbering  # the GPU it registered, in its own numbering and the scheduler's
    hold_time: float = 0.0  # finished holds only; a snapshot adds the running one
    waits: int = 0
    wait_time: float = 0.0  # finished waits only, likewise
    allocated: dict[int, int] = field(default_factory=dict)  # device -> bytes
    revocations: int = 0
    revoked: bool = False  # its last lock was taken away and it has not been granted since
    rate_refused: bool = False  # a move of its was too fast to count in a rate, and logged
    last_grant: dict[int, int] = field(default_factory=dict)  # device -> number of its last grant
    identity: Identity | None = None  # what configuration rules match on
    terms: Terms = field(default_factory=Terms)  # its share and limits, overrides included
    overrides: dict = field(default_factory=dict)  # term -> value set by gemsharectl
    mps: bool = False  # it was told to go through the scheduler's MPS server
    mps_why: str = ""  # and if not, why (mps_rules.py), once the scheduler runs MPS
    node: NodeIdentity | None = None  # its container, as the node says (budgets.py)
    identity_from: str = NAMED_BY_PROGRAM  # who named it (model/container.py)
    # device -> the move out last announced to it while it did not hold the device (IDLE_HINT)
    told_to_prepare: dict[int, int] = field(default_factory=dict)
    # device -> the most one EVICT or DROP_LOCK asked it to move out there (room_rules.py)
    asked_most: dict[int, int] = field(default_factory=dict)
    # device -> whether its last hold there ended by its own release, not a drop or revocation
    let_go: dict[int, bool] = field(default_factory=dict)
    # device -> its last MEM_REPORT, of which `allocated` holds what is believed (claims.py);
    # why the last was refused (None: it was not); and the refusals logged already
    reported: dict[int, int] = field(default_factory=dict)
    reported_at: dict[int, float] = field(default_factory=dict)  # when it last changed
    refusing: dict[int, str | None] = field(default_factory=dict)
    refused: set = field(default_factory=set)

    def __str__(self) -> str:
        who = self.registration
        return f"client {who.id} (pid {who.pid}, {who.name or '?'})"


@dataclass
class Hold:
    granted_at: float
    quantum_end: float
    dropped_at: float | None = None  # when DROP_LOCK was sent
    revoke_at: float = 0.0  # once dropped: grace, plus the time its move out may take
    drop_evict: int = 0  # once dropped: the bytes its DROP_LOCK asked it to move out
    idle_hint_ms: int = 0  # the last IDLE_HINT sent for this hold
    hint_evict_bytes: int = 0  # and the move out it announced
    turn_s: float = 0.0  # its quantum: TQ, shorter for a light weight beside heavier waiters
    preempt_at: float = float("inf")  # when a waiter under its share takes the device
    drop_reason: str = ""  # once dropped: why (policy.py's reasons)
    moved_so_far: int = 0  # once dropped: the most bytes its move's progress has reported
    moved_grew_at: float = float("-inf")  # and when that count last grew
    lending: bool = False  # its idle hint hands its next idle gap to the waiter (gap_rules.py)
    lender: int | None = None  # granted in that client's idle gap, which it gives back
    moved_off: int = 0  # what it said it moved off since it last held: its grant took all back
    granted_by: Decision | None = None  # the stage that granted it, and why (pipeline.py)
    dropped_by: Decision | None = None  # once dropped: the stage that dropped it, and why


@dataclass
class Wait:
    since: float
    queued: bool  # it had to wait behind someone, so its grant carries GRANT_AFTER_WAIT
    room_asked: bool = False  # clients were asked to move memory out for its grant
    room_readied: bool = False  # idle clients were asked for room while it waited for holders
    keeping: bool = False  # REQUEST_KEEPING: it keeps its lower devices until granted
    passed: bool = False  # a waiter under its share went ahead of it (share_rules.py)
    # the stage that put it ahead, placing it in the queue or having a holder drop for it, where
    # one did (pipeline.py)
    placed_by: Decision | None = None
    # the waiters it went ahead of when it asked, where a stage placed it (Queue)
    ahead_of: frozenset[int] = frozenset()


class Queue(MutableMapping):
    """A device's waiters (client -> Wait), in the order worked out from facts each time it
    is read: arrival, and for each waiter the waiters it went ahead of when it asked (a lender
    back from its gap, a client under its share: pipeline.py's stages place them). A waiter that
    went ahead stands just before the first of those still waiting; the others stand in order of
    arrival. Nothing reorders the queue in place: leaving it changes no one else's order."""

    def __init__(self) -> None:
        self._arrived: dict[int, Wait] = {}  # in order of arrival
        self._order: list[int] | None = None  # the order worked out last, until a fact changes

    def go_ahead(self, cid: int, of: Iterable[int]) -> None:
        """Waiter `cid`, the last to arrive, goes ahead of the waiters `of`."""
        self._arrived[cid].ahead_of = frozenset(of)
        self._order = None

    def order(self) -> list[int]:
        if self._order is None:
            order: list[int] = []
            for cid, wait in self._arrived.items():
                ahead = wait.ahead_of
                place = next((i for i, other in enumerate(order) if other in ahead),
                             len(order)) if ahead else len(order)
                order.insert(place, cid)
            self._order = order
        return self._order

    def __getitem__(self, cid: int) -> Wait:
        return self._arrived[cid]

    def __setitem__(self, cid: int, wait: Wait) -> None:
        self._arrived[cid] = wait
        self._order = None

    def __delitem__(self, cid: int) -> None:
        del self._arrived[cid]
        self._order = None

    def __contains__(self, cid: object) -> bool:
        return cid in self._arrived

    def __iter__(self) -> Iterator[int]:
        return iter(self.order())

    def __reversed__(self) -> Iterator[int]:
        return reversed(self.order())

    def __len__(self) -> int:
        return len(self._arrived)

    def __repr__(self) -> str:
        return f"Queue({[(cid, self._arrived[cid]) for cid in self.order()]})"


@dataclass
class Loan:
    """A holder's idle gap, lent: whoever is granted the device before the lender asks again
    gives it back then, until the lender's turn would have ended."""
    lender: int
    until: float  # when the lender's quantum would have ended


@dataclass
class Device:
    index: int
    holders: dict[int, Hold] = field(default_factory=dict)
    waiters: Queue = field(default_factory=Queue)  # in the order Queue works out
    evictions: dict[int, tuple[float, int]] = field(default_factory=dict)  # client -> EVICT's
    # deadline and bytes
    # EVICTs planned but not sent yet (client, bytes): one move at a time on the host link
    evict_queue: list[tuple[int, int]] = field(default_factory=list)
    # client -> until when its memory is coming back after its grant (one fetch at a time)
    fetching: dict[int, float] = field(default_factory=dict)
    # room was made, since the device last had a holder, for the client expected back first
    readied_ahead: bool = False

    @property
    def idle(self) -> bool:
        return not self.holders and not self.waiters

    @property
    def making_room(self) -> bool:
        """Clients are moving memory out for a grant, or are still to be asked."""
        return bool(self.evictions or self.evict_queue)
