"""What the policy core remembers between events: its clients, and each device's lock.

Plain records; policy.py's rules change them, snapshot.py reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .container import NAMED_BY_PROGRAM, NodeIdentity
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


@dataclass
class Wait:
    since: float
    queued: bool  # it had to wait behind someone, so its grant carries GRANT_AFTER_WAIT
    room_asked: bool = False  # clients were asked to move memory out for its grant
    room_readied: bool = False  # idle clients were asked for room while it waited for holders
    keeping: bool = False  # REQUEST_KEEPING: it keeps its lower devices until granted
    passed: bool = False  # a waiter under its share went ahead of it (share_rules.py)


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
    waiters: dict[int, Wait] = field(default_factory=dict)  # insertion order is FCFS order
    evictions: dict[int, tuple[float, int]] = field(default_factory=dict)  # client -> EVICT's
    # deadline and bytes
    # EVICTs planned but not sent yet (client, bytes): one move at a time on the host link
    evict_queue: list[tuple[int, int]] = field(default_factory=list)
    # client -> until when its memory is coming back after its grant (one fetch at a time)
    fetching: dict[int, float] = field(default_factory=dict)
    # room was made, since the device last had a holder, for the client expected back first
    readied_ahead: bool = False
    loan: Loan | None = None
    # client -> until when it goes to the front of the queue when it asks again: it gave the
    # device back to a lender, and would otherwise have been next
    displaced: dict[int, float] = field(default_factory=dict)

    def loan_at(self, now: float) -> Loan | None:
        """Its loan, while the lender's turn would still last."""
        return self.loan if self.loan is not None and now < self.loan.until else None

    @property
    def idle(self) -> bool:
        return not self.holders and not self.waiters

    @property
    def making_room(self) -> bool:
        """Clients are moving memory out for a grant, or are still to be asked."""
        return bool(self.evictions or self.evict_queue)
