"""The lock rules for gangs, the processes of one distributed job, as part of the policy core.

A mixin of policy.Policy: these methods read and change the policy's devices, clients and
gangs (gangs.py keeps who belongs to which) and call its grant, drop and revoke. Kept apart so
that the rules of a job's turns can be read on their own.

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
from ..model.decision import DROPPED, Decision
from ..model.state import Client, Device
from ..model.text import QUANTUM, listed, printable
from .gangs import MAX_GANG_SIZE, Gang

GANGS = "gangs"  # the stage of the decision pipeline these rules are (pipeline.py)


def with_gang(reason: str) -> Decision:
    """The drop of a member whose gang's turn is being dropped, for `reason`."""
    return Decision(GANGS, DROPPED, "with its gang", reason)


class GangRules:
    def gang(self, cid: int, message: p.Gang, now: float) -> list:
        """The client is one process of a distributed job: join it to the job's gang."""
        client = self.clients.get(cid)
        if client is None:
            return []
        name = printable(message.name, 128)
        if cid in self.gangs.of_client:
            return [Close(cid, "GANG may be sent once per connection", p.ErrorCode.PROTOCOL)]
        if any(cid in dev.holders or cid in dev.waiters for dev in self.devices.values()):
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
                        "scheduled one by one", warning=True)] + self._settle_members(gang, now)
        actions = [Log(f"gang {client}: rank {message.rank} of {gang}")]
        if gang.scheduled_together:
            actions += [Log(f"{gang} complete: its members' locks are granted together")]
            actions += self._settle_members(gang, now)
        return actions

    def _reserving_gang(self, device: int) -> Gang | None:
        """The gang whose running turn owns the device, if any."""
        return next((gang for gang in self.gangs
                     if gang.turn_devices is not None and device in gang.turn_devices), None)

    def _member_devices(self, gang: Gang) -> list[Device]:
        return [dev for dev in self.devices.values()
                if any(cid in dev.waiters or cid in dev.holders for cid in gang.members)]

    def _gang_ready(self, gang: Gang) -> bool:
        """Whether a complete gang between turns may be granted now: every member waits, and
        every device they wait on is held by nobody else and moves no memory."""
        waiting = {cid for dev in self.devices.values() for cid in dev.waiters}
        if not set(gang.members) <= waiting:
            return False
        return all(set(dev.holders) <= set(gang.members) and not dev.evictions
                   for dev in self._member_devices(gang))

    def _gang_blocks(self, cid: int) -> bool:
        """Whether a waiter may not be granted now for its gang's sake: between turns, until the
        whole gang can go. In a turn a member gets a free device at once, even while the turn
        is being dropped (the others' draining collectives may wait for its part), unless it
        has already let go after the drop."""
        gang = self.gangs.of(cid)
        if gang is None:
            return False
        if gang.turn_devices is None:
            return not self._gang_ready(gang)
        return cid in gang.done

    def _gang_drop_reason(self, gang: Gang) -> str | None:
        """Why the gang's turn is being dropped, or None while it runs on."""
        return next((hold.drop_reason for dev in self._member_devices(gang)
                     for member, hold in dev.holders.items()
                     if member in gang.members and hold.dropped_at is not None), None)

    def _gang_contended(self, gang: Gang) -> bool:
        """Whether anyone outside the gang waits for a device of its turn."""
        return any(cid not in gang.members for index in gang.turn_devices or ()
                   if index in self.devices for cid in self.devices[index].waiters)

    def _grant_gang(self, gang: Gang, now: float) -> list:
        """Grant every member every device it waits on, for one quantum."""
        gang.turn_devices, gang.turn_ends, gang.done = set(), now + self.tq, set()
        actions, granted = [], []
        for dev in self._member_devices(gang):
            members = [cid for cid in dev.waiters if cid in gang.members]
            for cid in members:
                actions += self._grant(dev, cid, now, shared=len(members) > 1)
            granted.append(dev)
        actions.insert(0, Log(f"grant {gang}: devices {listed(sorted(gang.turn_devices))} "
                              "together"))
        for dev in granted[1:]:
            actions += self._idle_hints(dev, now)
        return actions

    def _end_gang_turn(self, dev: Device, now: float) -> list:
        """Drop the whole gang whose turn owns the device once its quantum is over and someone
        else waits for one of its devices."""
        gang = self._reserving_gang(dev.index)
        if gang is None or now < gang.turn_ends or not self._gang_contended(gang):
            return []
        for other in self._member_devices(gang):
            for cid, hold in other.holders.items():
                if cid in gang.members and hold.dropped_at is None:
                    return self._drop(other, cid, now, f"quantum over for {gang}", QUANTUM,
                                      Decision(GANGS, DROPPED, "its gang's quantum over",
                                               QUANTUM))
        return []

    def _drop_gang(self, cid: int, now: float, reason: str) -> list:
        """A member dropped: drop the others too, as their collectives need it."""
        gang = self.gangs.of(cid)
        if gang is None or gang.turn_devices is None:
            return []
        actions = []
        for dev in self._member_devices(gang):
            for member, hold in list(dev.holders.items()):
                if member in gang.members and hold.dropped_at is None:
                    actions += self._drop(dev, member, now, f"with {gang}", reason,
                                          with_gang(reason))
        return actions

    def _gang_let_go(self, cid: int, now: float, after_drop: bool = True) -> list:
        """After a member's hold ended (`after_drop`: answering a drop, or revoked): once no
        member holds anything, the turn is over and the devices it kept for the gang go to
        whoever waits."""
        gang = self.gangs.of_client.get(cid)
        if gang is not None and gang.turn_devices is not None and after_drop:
            gang.done.add(cid)
        if gang is None or gang.turn_devices is None or \
                any(member in dev.holders for dev in self.devices.values()
                    for member in gang.members):
            return []
        freed, gang.turn_devices, gang.turn_ends = gang.turn_devices, None, math.inf
        actions = [Log(f"turn over for {gang}", debug=True)]
        for index in sorted(freed):
            if index in self.devices:
                actions += self._settle(self.devices[index], now)
        return actions + self._settle_members(gang, now)

    def _gang_outgrows_turn(self, cid: int, dev: Device, now: float) -> list:
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
                    return self._drop(other, member, now, f"{self.clients[cid]} of {gang} needs "
                                      f"device {dev.index}, held by another", QUANTUM,
                                      Decision(GANGS, DROPPED, "its gang needs another device",
                                               QUANTUM))
        return []

    def _leave_gang(self, client: Client, now: float) -> list:
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
                actions += self._revoke(dev, member, now, f"its gang lost {client}")
        gang.turn_devices, gang.turn_ends = None, math.inf
        return actions

    def _settle_members(self, gang: Gang, now: float) -> list:
        actions = []
        for dev in self._member_devices(gang):
            if dev.index in self.devices:
                actions += self._settle(dev, now)
        return actions
