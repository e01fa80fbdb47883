"""The lock rules for gangs, the processes of one distributed job, as part of the policy core.

The stage `gangs` of the decision pipeline (pipeline.py), the first: it keeps the gangs
(gangs.py keeps who belongs to which), reads the policy's devices and clients and calls its
grant, drop and revoke.

The processes of one distributed job wait on each other inside collectives, so holding some of
their GPUs while others wait stalls them all.

- A member's requests wait until its gang is complete; a gang not complete within the gang
  timeout, or joined with another size, is broken, and its members are scheduled one by one.
- A complete gang is granted as a whole: once every member waits, and every device they wait on
  is free, each member gets each of its devices at once, for one shared quantum of TQ. Until
  then its members block the devices they wait on once they have waited a TQ, as a waiter that
  does not fit in `auto` does, so a gang is not starved by single clients.
- During the turn the devices granted are the gang's alone: a member that released one early
  gets it back at once, nobody else does, until every member has let go.
- Any drop of a member drops them all (quantum, a waiter under its share, a limit); a member
  that disconnects has the others' locks revoked at once, since their collectives cannot finish
  without it, and breaks the gang.
"""

from __future__ import annotations

import math

from ... import protocol as p
from ..model.actions import Close, Log
from ..model.decision import DROPPED, GRANTED, WAITS, Decision
from ..model.stage import Stage
from ..model.state import Client, Device
from ..model.text import QUANTUM, listed, printable
from .gangs import MAX_GANG_SIZE, Gang, Gangs

GANGS = "gangs"  # the stage of the decision pipeline these rules are (pipeline.py)


def with_gang(reason: str) -> Decision:
    """The drop of a member whose gang's turn is being dropped, for `reason`."""
    return Decision(GANGS, DROPPED, "with its gang", reason)


class GangStage(Stage):
    name = GANGS

    def __init__(self, policy):
        super().__init__(policy)
        self.gangs = Gangs(policy.gang_timeout_s)  # who belongs to which

    # ----- the stage's answers ----------------------------------------------------------------

    def eligible_at(self, device: int, cid: int) -> float | None:
        """A member of a gang that is still forming waits until the gang is complete or gives
        up."""
        forming = self.gangs.forming(cid)
        return None if forming is None else forming.formed_from + self.gangs.timeout_s

    def holds_back(self, dev: Device, cid: int, now: float) -> Decision | None:
        forming = self.gangs.forming(cid)
        if forming is not None:
            return Decision(self.name, WAITS, f"for its gang {forming.name} to form")
        reserver = self.reserving(dev.index)
        if reserver is not None and cid not in reserver.members:
            return Decision(self.name, WAITS, f"the turn of gang {reserver.name}")
        if self.blocks(cid):
            return Decision(self.name, WAITS, "for its whole gang's devices to be free")
        return None

    def grants(self, dev: Device, cid: int, wait, now: float) -> Decision | None:
        gang = self.gangs.of(cid)
        return Decision(self.name, GRANTED, f"with its gang {gang.name}") \
            if gang is not None else None

    # ----- joining ----------------------------------------------------------------------------

    def join(self, cid: int, message: p.Gang, now: float) -> list:
        """The client is one process of a distributed job: join it to the job's gang."""
        client = self.policy.clients.get(cid)
        if client is None:
            return []
        name = printable(message.name, 128)
        if cid in self.gangs.of_client:
            return [Close(cid, "GANG may be sent once per connection", p.ErrorCode.PROTOCOL)]
        if any(cid in dev.holders or cid in dev.waiters for dev in self.policy.devices.values()):
            return [Close(cid, "GANG must come before the client's first REQUEST_LOCK",
                          p.ErrorCode.PROTOCOL)]
        if not name or not 2 <= message.local_size <= MAX_GANG_SIZE:
            return [Log(f"gang of {client} ignored: a gang needs a name and 2 to "
                        f"{MAX_GANG_SIZE} members on this node, not {message.local_size}; "
                        "it is scheduled on its own", warning=True)]
        joined = self.gangs.join(cid, client.registration.uid, name, message.local_size,
                                 message.world_size, message.rank, now)
        gang = joined.gang
        if joined.problem:
            return [Log(f"{gang} broken by {client}: {joined.problem}; its members are "
                        "scheduled one by one", warning=True)] + self.settle_members(gang, now)
        actions = [Log(f"gang {client}: rank {message.rank} of {gang}")]
        if gang.scheduled_together:
            actions += [Log(f"{gang} complete: its members' locks are granted together")]
            actions += self.settle_members(gang, now)
        return actions

    def reserving(self, device: int) -> Gang | None:
        """The gang whose running turn owns the device, if any."""
        return next((gang for gang in self.gangs
                     if gang.turn_devices is not None and device in gang.turn_devices), None)

    def _member_devices(self, gang: Gang) -> list[Device]:
        return [dev for dev in self.policy.devices.values()
                if any(cid in dev.waiters or cid in dev.holders for cid in gang.members)]

    def _ready(self, gang: Gang) -> bool:
        """Whether a complete gang between turns may be granted now: every member waits, and
        every device they wait on is held by nobody else and moves no memory."""
        waiting = {cid for dev in self.policy.devices.values() for cid in dev.waiters}
        if not set(gang.members) <= waiting:
            return False
        return all(set(dev.holders) <= set(gang.members) and not dev.evictions
                   for dev in self._member_devices(gang))

    def blocks(self, cid: int) -> bool:
        """Whether a waiter may not be granted now for its gang's sake: between turns, until the
        whole gang can go. In a turn a member gets a free device at once, even while the turn
        is being dropped (the others' draining collectives may wait for its part), unless it
        has already let go after the drop."""
        gang = self.gangs.of(cid)
        if gang is None:
            return False
        if gang.turn_devices is None:
            return not self._ready(gang)
        return cid in gang.done

    def drop_reason(self, gang: Gang) -> str | None:
        """Why the gang's turn is being dropped, or None while it runs on."""
        return next((hold.drop_reason for dev in self._member_devices(gang)
                     for member, hold in dev.holders.items()
                     if member in gang.members and hold.dropped_at is not None), None)

    def contended(self, gang: Gang) -> bool:
        """Whether anyone outside the gang waits for a device of its turn."""
        return any(cid not in gang.members for index in gang.turn_devices or ()
                   if index in self.policy.devices for cid in self.policy.devices[index].waiters)

    def grant_gang(self, gang: Gang, now: float) -> list:
        """Grant every member every device it waits on, for one quantum."""
        gang.turn_devices, gang.turn_ends, gang.done = set(), now + self.policy.tq, set()
        actions, granted = [], []
        for dev in self._member_devices(gang):
            members = [cid for cid in dev.waiters if cid in gang.members]
            for cid in members:
                actions += self.policy._grant(dev, cid, now, shared=len(members) > 1)
            granted.append(dev)
        actions.insert(0, Log(f"grant {gang}: devices {listed(sorted(gang.turn_devices))} "
                              "together"))
        for dev in granted[1:]:
            actions += self.policy.room_rules.idle_hints(dev, now)
        return actions

    def end_gang_turn(self, dev: Device, now: float) -> list:
        """Drop the whole gang whose turn owns the device once its quantum is over and someone
        else waits for one of its devices."""
        gang = self.reserving(dev.index)
        if gang is None or now < gang.turn_ends or not self.contended(gang):
            return []
        for other in self._member_devices(gang):
            for cid, hold in other.holders.items():
                if cid in gang.members and hold.dropped_at is None:
                    return self.policy._drop(other, cid, now, f"quantum over for {gang}", QUANTUM,
                                             Decision(GANGS, DROPPED, "its gang's quantum over",
                                                      QUANTUM))
        return []

    def drop_members(self, cid: int, now: float, reason: str) -> list:
        """A member dropped: drop the others too, as their collectives need it."""
        gang = self.gangs.of(cid)
        if gang is None or gang.turn_devices is None:
            return []
        actions = []
        for dev in self._member_devices(gang):
            for member, hold in list(dev.holders.items()):
                if member in gang.members and hold.dropped_at is None:
                    actions += self.policy._drop(dev, member, now, f"with {gang}", reason,
                                                 with_gang(reason))
        return actions

    def let_go(self, cid: int, now: float, after_drop: bool = True) -> list:
        """After a member's hold ended (`after_drop`: answering a drop, or revoked): once no
        member holds anything, the turn is over and the devices it kept for the gang go to
        whoever waits."""
        gang = self.gangs.of_client.get(cid)
        if gang is not None and gang.turn_devices is not None and after_drop:
            gang.done.add(cid)
        if gang is None or gang.turn_devices is None or \
                any(member in dev.holders for dev in self.policy.devices.values()
                    for member in gang.members):
            return []
        freed, gang.turn_devices, gang.turn_ends = gang.turn_devices, None, math.inf
        actions = [Log(f"turn over for {gang}", debug=True)]
        for index in sorted(freed):
            if index in self.policy.devices:
                actions += self.policy._settle(self.policy.devices[index], now)
        return actions + self.settle_members(gang, now)

    def outgrows_turn(self, cid: int, dev: Device, now: float) -> list:
        """A member asks, during its gang's turn, for a device someone else holds: waiting for it
        while the others hold theirs could stall the job, so the turn ends and the next one
        takes that device too."""
        gang = self.gangs.of(cid)
        if gang is None or gang.turn_devices is None or dev.index in gang.turn_devices or \
                set(dev.holders) <= set(gang.members):
            return []
        for other in self._member_devices(gang):
            for member, hold in other.holders.items():
                if member in gang.members and hold.dropped_at is None:
                    why = f"{self.policy.clients[cid]} of {gang} needs device {dev.index}, " \
                        "held by another"
                    return self.policy._drop(other, member, now, why, QUANTUM,
                                             Decision(GANGS, DROPPED,
                                                      "its gang needs another device", QUANTUM))
        return []

    def leave(self, client: Client, now: float) -> list:
        """A member disconnected: the others cannot finish a collective without it, so their
        locks are taken back at once, and they run one by one from now on (the processes of a
        restarted job form a new gang)."""
        cid = client.registration.id
        gang = self.gangs.of_client.get(cid)
        together = gang is not None and gang.scheduled_together
        self.gangs.leave(cid)
        if gang is None or not together:
            return []
        actions = [Log(f"{gang}: a member left, so the gang is broken: the others' locks are "
                       "taken back and they run one by one", warning=True)]
        for dev in self._member_devices(gang):
            for member in [member for member in dev.holders if member in gang.members]:
                actions += self.policy._revoke(dev, member, now, f"its gang lost {client}")
        gang.turn_devices, gang.turn_ends = None, math.inf
        return actions

    def settle_members(self, gang: Gang, now: float) -> list:
        actions = []
        for dev in self._member_devices(gang):
            if dev.index in self.policy.devices:
                actions += self.policy._settle(dev, now)
        return actions
