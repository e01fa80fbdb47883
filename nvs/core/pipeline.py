"""The policy core's decisions as one pipeline of stages, in precedence order (the Linux
scheduler's list of scheduling classes is the model): each rule is a stage, every stage answers
the same questions, and the first stage in `STAGES` that answers one decides it.

The questions, asked of each device whenever it settles (policy.Policy._settle) and of each
request as it comes:

- `arrive`: a request comes in, before the device settles: may this stage place it in the queue
  (and what does that do to the holders)?
- `queue`: the request waits behind someone: may this stage place it, if no stage did on arrival?
- `holds_back`: why a waiter may not be granted yet (what status says of it).
- `grants`: why a grant was made (what its log line and status say).
- `end_turn`: whether a holder's turn ends now, and why; a stage may also keep the holder past the
  turns of the stages below it that end turns for waiters (`Keep`).

Every answer is a `Decision` naming its stage, so the log and `gemsharectl status` say which
rule made it ("granted: under its share", "dropped: quantum over"). The base order of the queue
is arrival; only `arrive` and `queue` place a waiter elsewhere, and the place a stage gives it is
kept on the wait (`Wait.placed_by`), so later decisions can name it.

The stages hold no copy of the policy's state: each is handed the policy whose devices and
clients it reads, and the rules' arithmetic stays in rules/. docs/scheduling.md has the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import protocol as p
from .model.decision import DROPPED, GRANTED, KEEPS, WAITS, Decision
from .model.state import Device, Hold, Wait
from .model.text import GAP, GPU_LIMIT, MEMORY, MODE, QUANTUM, SHARE
from .rules.gang_rules import GANGS

if TYPE_CHECKING:
    from .policy import Policy


@dataclass(frozen=True)
class Keep:
    """An answer of `end_turn`: the holder keeps the device past the turns that the stages
    below this one end for waiters."""
    decision: Decision


@dataclass(frozen=True)
class Placement:
    """An answer of `arrive` or `queue`: the stage placed the waiter (`decision`; None where it
    left it where it was and only acted on the holders), and what that did."""
    decision: Decision | None
    words: str  # for the request's log line
    actions: list


class Stage:
    """One rule of the policy core. Every question has a default answer: this stage has no say."""
    name = ""
    # Its turn ends are for a waiter's sake: a Keep from a stage above shields them.
    for_waiters = False

    def arrive(self, policy: Policy, dev: Device, cid: int, now: float) -> Placement | None:
        return None

    def queue(self, policy: Policy, dev: Device, cid: int, now: float) -> Placement | None:
        return None

    def holds_back(self, policy: Policy, dev: Device, cid: int, now: float) -> Decision | None:
        return None

    def grants(self, policy: Policy, dev: Device, cid: int, wait: Wait,
               now: float) -> Decision | None:
        return None

    def end_turn(self, policy: Policy, dev: Device, cid: int, hold: Hold, first: int | None,
                 now: float) -> Decision | Keep | None:
        """`first`: the first waiter that may be granted now, if any."""
        return None


class Gangs(Stage):
    """The processes of one distributed job hold their devices together (rules/gang_rules.py);
    their whole turn ends at once, in Policy._settle, before any single holder's."""
    name = GANGS

    def holds_back(self, policy, dev, cid, now):
        forming = policy.gangs.forming(cid)
        if forming is not None:
            return Decision(self.name, WAITS, f"for its gang {forming.name} to form")
        reserver = policy._reserving_gang(dev.index)
        if reserver is not None and cid not in reserver.members:
            return Decision(self.name, WAITS, f"the turn of gang {reserver.name}")
        if policy._gang_blocks(cid):
            return Decision(self.name, WAITS, "for its whole gang's devices to be free")
        return None

    def grants(self, policy, dev, cid, wait, now):
        gang = policy.gangs.of(cid)
        return Decision(self.name, GRANTED, f"with its gang {gang.name}") \
            if gang is not None else None


class Memory(Stage):
    """Who may hold together: one holder in `on`, in `auto` those whose memory fits (with
    bounded overtaking, rules/admission.py); holders that no longer fit are dropped."""
    name = "memory"

    def holds_back(self, policy, dev, cid, now):
        if policy.mode is p.Mode.AUTO and dev.holders and \
                not policy._fits_beside_holders(dev, cid):
            return Decision(self.name, WAITS, "does not fit beside the holders")
        return None

    def grants(self, policy, dev, cid, wait, now):
        return Decision(self.name, GRANTED, "fits beside the holders") if dev.holders else None


class Room(Stage):
    """A grant waits for the room its memory needs, one move on the link at a time
    (rules/room_rules.py)."""
    name = "room"

    def holds_back(self, policy, dev, cid, now):
        if dev.making_room:
            return Decision(self.name, WAITS, "for room on the device")
        if policy._fetching(dev, now) and policy.residency.moved_off(dev.index, cid) > 0:
            return Decision(self.name, WAITS, "for a holder's memory to come back first")
        return None


class Copies(Stage):
    """A holder waiting for a device of a higher index, keeping this one (REQUEST_KEEPING),
    keeps it past its turn until it has that one (Policy._waits_above)."""
    name = "copies"

    def holds_back(self, policy, dev, cid, now):
        if any(policy._waits_above(holder, dev.index) for holder in dev.holders):
            return Decision(self.name, WAITS, "the holder keeps it for a copy to a higher device")
        return None

    def end_turn(self, policy, dev, cid, hold, first, now):
        if first is not None and policy._waits_above(cid, dev.index):
            return Keep(Decision(self.name, KEEPS, "for a copy to a higher device"))
        return None


class Gaps(Stage):
    """A holder's idle gap lent to the waiter; the lender back goes first, and whoever holds on
    its loan is dropped (rules/gap_rules.py)."""
    name = "gaps"

    def arrive(self, policy, dev, cid, now):
        words, actions, placed = policy._returning(dev, cid, now)
        if placed is None:
            return None
        return Placement(Decision(self.name, WAITS, placed), words, actions)

    def holds_back(self, policy, dev, cid, now):
        loan = dev.loan_at(now)
        if loan is not None and loan.lender == cid:
            return Decision(self.name, WAITS, "back from its gap, for the borrower to give way")
        if loan is not None and loan.lender in dev.waiters and \
                list(dev.waiters).index(loan.lender) < list(dev.waiters).index(cid):
            return Decision(self.name, WAITS, "behind a lender back from its gap")
        return None

    def grants(self, policy, dev, cid, wait, now):
        loan = dev.loan_at(now)
        if loan is None or policy.gangs.of(cid) is not None:
            return None
        if loan.lender == cid:
            return Decision(self.name, GRANTED, "back from its idle gap")
        return Decision(self.name, GRANTED, "in a lender's idle gap")


class Quantum(Stage):
    """First come, first served, for one TQ (shorter for a light weight beside heavier
    waiters) while someone waits."""
    name = "quantum"
    for_waiters = True

    def end_turn(self, policy, dev, cid, hold, first, now):
        if first is not None and now >= hold.quantum_end:
            return Decision(self.name, DROPPED, "quantum over", QUANTUM,
                            f"quantum over, {len(dev.waiters)} waiting")
        return None


class Shares(Stage):
    """A waiter clearly under its share goes ahead of busier ones and cuts the holder's turn to
    a minimum slice (rules/share_rules.py)."""
    name = "shares"
    for_waiters = True

    def queue(self, policy, dev, cid, now):
        placed, actions = policy._claim_share(dev, cid, now)
        if not placed and not actions:
            return None
        return Placement(CLAIMED, "", actions)

    def holds_back(self, policy, dev, cid, now):
        ahead = list(dev.waiters)[:list(dev.waiters).index(cid)]
        if any(_placed_by(dev.waiters[other], self.name) for other in ahead):
            return Decision(self.name, WAITS, "behind a waiter under its share")
        return None

    def grants(self, policy, dev, cid, wait, now):
        return Decision(self.name, GRANTED, "under its share") \
            if _placed_by(wait, self.name) else None

    def end_turn(self, policy, dev, cid, hold, first, now):
        if first is not None and now >= hold.preempt_at:
            return Decision(self.name, DROPPED, "slice over for a waiter under its share", SHARE,
                            f"slice over for {policy.clients[first]}, under its share")
        return None


class Limits(Stage):
    """A client with a gpu_limit is dropped at its level, whoever waits, and waits until its
    usage has fallen enough for another turn (rules/shares.py)."""
    name = "limits"

    def holds_back(self, policy, dev, cid, now):
        if policy.clients[cid].terms.gpu_limit is not None and \
                policy._eligible_at(cid, dev.index) > now:
            return Decision(self.name, WAITS, "paused by its gpu limit")
        return None

    def end_turn(self, policy, dev, cid, hold, first, now):
        if now >= policy._limit_reached_at(cid, dev.index):
            limit = policy.clients[cid].terms.gpu_limit
            return Decision(self.name, DROPPED, "gpu limit reached", GPU_LIMIT,
                            f"gpu limit {limit:g} reached")
        return None


def _placed_by(wait: Wait, stage: str) -> bool:
    return wait.placed_by is not None and wait.placed_by.stage == stage


# The stages, highest precedence first: where two would decide one question, the first does.
STAGES: tuple[Stage, ...] = (Gangs(), Memory(), Room(), Copies(), Gaps(), Quantum(), Shares(),
                             Limits())

# A waiter that went ahead of busier ones, or had a busier holder drop for it.
CLAIMED = Decision(Shares.name, WAITS, "under its share, ahead of busier clients")
# What a drop for each reason says, where no stage's own words came with it.
DROP_DECISIONS = {
    QUANTUM: Decision(Quantum.name, DROPPED, "quantum over", QUANTUM),
    SHARE: Decision(Shares.name, DROPPED, "slice over for a waiter under its share", SHARE),
    GPU_LIMIT: Decision(Limits.name, DROPPED, "gpu limit reached", GPU_LIMIT),
    MEMORY: Decision(Memory.name, DROPPED, "the holders no longer fit", MEMORY),
    MODE: Decision(Memory.name, DROPPED, "the mode allows fewer holders", MODE),
    GAP: Decision(Gaps.name, DROPPED, "the lender is back from its gap", GAP),
}
# What no stage decided is first come, first served: a waiter whose turn in line has not come,
# a grant to the first in line or on a free device.
IN_LINE = Decision(Quantum.name, WAITS, "its turn in line")
FIRST_IN_LINE = Decision(Quantum.name, GRANTED, "first in line")
DEVICE_FREE = Decision(Quantum.name, GRANTED, "device free")


class Pipeline:
    """The stages of one policy, in precedence order, asked as the module says."""

    def __init__(self, stages: Sequence[Stage] = STAGES):
        names = [stage.name for stage in stages]
        if len(set(names)) != len(names) or not all(names):
            raise ValueError(f"every stage needs a name of its own, not {names}")
        self.stages = tuple(stages)

    def names(self) -> list[str]:
        return [stage.name for stage in self.stages]

    def arrive(self, policy: Policy, dev: Device, cid: int, now: float) -> Placement | None:
        return _first(stage.arrive(policy, dev, cid, now) for stage in self.stages)

    def queue(self, policy: Policy, dev: Device, cid: int, now: float) -> Placement | None:
        return _first(stage.queue(policy, dev, cid, now) for stage in self.stages)

    def holds_back(self, policy: Policy, dev: Device, cid: int, now: float) -> Decision:
        return _first(stage.holds_back(policy, dev, cid, now) for stage in self.stages) \
            or IN_LINE

    def grants(self, policy: Policy, dev: Device, cid: int, wait: Wait, now: float) -> Decision:
        return _first(stage.grants(policy, dev, cid, wait, now) for stage in self.stages) or \
            (FIRST_IN_LINE if wait.queued else DEVICE_FREE)

    def end_turn(self, policy: Policy, dev: Device, cid: int, hold: Hold, first: int | None,
                 now: float) -> Decision | None:
        """The drop that ends the holder's turn now, if any: the first stage's, skipping those
        that end turns for waiters once a stage above them keeps the holder."""
        kept = False
        for stage in self.stages:
            if kept and stage.for_waiters:
                continue
            answer = stage.end_turn(policy, dev, cid, hold, first, now)
            if isinstance(answer, Keep):
                kept = True
            elif answer is not None:
                return answer
        return None


def _first(answers):
    return next((answer for answer in answers if answer is not None), None)
