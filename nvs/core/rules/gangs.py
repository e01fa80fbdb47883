"""Which clients form a gang: the processes of one distributed job on this node.

Pure bookkeeping; policy.py decides what a gang's membership means for its locks. A gang is
named by its job (GANG message) and belongs to one user: a process of another user that names
the same job starts a gang of its own, so nobody can join, and so stall, someone else's job.

A gang is `forming` until as many members as it expects have joined, `complete` from then on,
and `broken` when it did not fill within the timeout, was joined with a different size, or lost
a member once complete: its members are then scheduled one by one, as clients without a gang
are. A broken gang's name is free again: the processes of a restarted job form a new gang.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FORMING, COMPLETE, BROKEN = "forming", "complete", "broken"
DEFAULT_GANG_TIMEOUT_S = 60.0
MAX_GANG_SIZE = 64  # one node runs no more processes of a job than it has GPUs, and fewer


@dataclass
class Gang:
    name: str
    uid: int
    size: int  # members expected on this node
    world_size: int  # members of the whole job, all nodes; informational
    formed_from: float  # when it last started to wait for members: its timeout runs from here
    members: dict[int, int] = field(default_factory=dict)  # client -> its rank in the job
    state: str = FORMING
    # While a turn runs: the devices granted to its members in it, which nobody else is granted
    # until every member has let go; None between turns.
    turn_devices: set[int] | None = None
    turn_ends: float = float("inf")  # when the turn's quantum is over
    # Members that let go of a device after the turn's drop: done with this turn, they wait for
    # the next, so that members releasing one after another cannot keep a dropped turn alive.
    done: set[int] = field(default_factory=set)

    @property
    def key(self) -> tuple[int, str]:
        return self.uid, self.name

    @property
    def scheduled_together(self) -> bool:
        return self.state == COMPLETE

    def __str__(self) -> str:
        return f"gang {self.name!r} (uid {self.uid}, {len(self.members)}/{self.size})"


@dataclass(frozen=True)
class Joined:
    gang: Gang
    problem: str = ""  # why the client is scheduled on its own instead, if it is


class Gangs:
    def __init__(self, timeout_s: float = DEFAULT_GANG_TIMEOUT_S):
        self.timeout_s = timeout_s
        self.by_key: dict[tuple[int, str], Gang] = {}  # the gangs a new process may join
        self.of_client: dict[int, Gang] = {}
        self.live: list[Gang] = []  # every gang with members, joinable or broken, as formed

    def join(self, cid: int, uid: int, name: str, size: int, world_size: int, rank: int,
             now: float) -> Joined:
        """Add a client to its gang (made on first sight). A size that disagrees with the gang's,
        or a member past its size, breaks the gang: scheduling it as a whole could wait for
        members that will never come, or leave one out of its turns."""
        gang = self.by_key.get((uid, name))
        if gang is None:
            gang = self.by_key[(uid, name)] = Gang(name, uid, size, world_size, now)
            self.live.append(gang)
        gang.members[cid] = rank
        self.of_client[cid] = gang
        problem = ""
        if size != gang.size:
            problem = f"it names size {size}, the gang's first member {gang.size}"
        elif len(gang.members) > gang.size:
            problem = f"it is member {len(gang.members)} of a gang of {gang.size}"
        if problem:
            self._break(gang)
        elif gang.state == FORMING and len(gang.members) == gang.size:
            gang.state = COMPLETE
        return Joined(gang, problem)

    def leave(self, cid: int) -> Gang | None:
        """Remove a client. A complete gang that loses a member is broken: the others may
        finish, fail or be restarted by their launcher, and none of that should wait for a
        replacement. A gang is forgotten once empty."""
        gang = self.of_client.pop(cid, None)
        if gang is None:
            return None
        del gang.members[cid]
        if gang.state == COMPLETE:
            self._break(gang)
        if not gang.members:
            self._break(gang)
            self.live.remove(gang)
        return gang

    def _break(self, gang: Gang) -> None:
        gang.state = BROKEN
        if self.by_key.get(gang.key) is gang:
            del self.by_key[gang.key]

    def of(self, cid: int) -> Gang | None:
        """The gang a client is scheduled with, if any (not one that is forming or broken)."""
        gang = self.of_client.get(cid)
        return gang if gang is not None and gang.scheduled_together else None

    def forming(self, cid: int) -> Gang | None:
        gang = self.of_client.get(cid)
        return gang if gang is not None and gang.state == FORMING else None

    def timeouts(self) -> list[tuple[float, Gang]]:
        """When each forming gang gives up waiting for its members."""
        return [(gang.formed_from + self.timeout_s, gang) for gang in self.by_key.values()
                if gang.state == FORMING]

    def expire(self, now: float) -> list[Gang]:
        """Break the gangs whose members did not all come in time."""
        expired = [gang for at, gang in self.timeouts() if now >= at]
        for gang in expired:
            self._break(gang)
        return expired

    def __iter__(self):
        return iter(self.live)
