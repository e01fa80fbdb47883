"""The policy core's decisions as one pipeline of stages, in precedence order (the Linux
scheduler's list of scheduling classes is the model): each rule is a stage with its own state
(model/stage.py has the interface), every stage answers the same questions, and the first stage
in `STAGES` that answers one decides it.

The questions, asked of each device whenever it settles (policy.Policy._settle) and of each
request as it comes:

- `arrive`: a request comes in, before the device settles: may this stage place it in the queue
  (and what does that do to the holders)?
- `queue`: the request waits behind someone: may this stage place it, if no stage did on arrival?
- `eligible_at`: from when may a waiter be granted?
- `holds_back`: why a waiter may not be granted yet (what the log and status say of it).
- `grants`: why a grant was made (what its log line and status say).
- `end_turn`: whether a holder's turn ends now, and why; a stage may also keep the holder past the
  turns of the stages below it that end turns for waiters (`Keep`).

Every answer is a `Decision` naming its stage, so the log and `gemsharectl status` say which
rule made it ("granted: under its share", "dropped: quantum over"). The queue's order is worked
out from facts (model/state.py's Queue): arrival, and whom each waiter that `arrive` or `queue`
placed went ahead of; the stage that put a waiter ahead is kept on its wait (`Wait.placed_by`),
so later decisions can name it.

Where a stage's rules are long they live in rules/ (gap_rules.py, share_rules.py,
gang_rules.py); the short ones are here. docs/scheduling.md has the table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .. import protocol as p
from .model.decision import DROPPED, GRANTED, KEEPS, WAITS, Decision
from .model.stage import Keep, Placement, Stage
from .model.state import Device, Hold, Wait
from .model.text import GAP, GPU_LIMIT, MEMORY, MODE, QUANTUM, SHARE
from .rules.gang_rules import GangStage
from .rules.gap_rules import GapStage
from .rules.room_rules import RoomStage
from .rules.share_rules import LIMITS, SHARES, LimitStage, ShareStage


class Memory(Stage):
    """Who may hold together: one holder in `on`, in `auto` those whose memory fits (with
    bounded overtaking, rules/admission.py); holders that no longer fit are dropped."""
    name = "memory"

    def holds_back(self, dev, cid, now):
        if self.policy.mode is p.Mode.AUTO and dev.holders and \
                not self.policy._fits_beside_holders(dev, cid):
            return Decision(self.name, WAITS, "does not fit beside the holders")
        return None

    def grants(self, dev, cid, wait, now):
        return Decision(self.name, GRANTED, "fits beside the holders") if dev.holders else None


class Copies(Stage):
    """A holder waiting for a device of a higher index, keeping this one (REQUEST_KEEPING),
    keeps it past its turn until it has that one (Policy._waits_above)."""
    name = "copies"

    def holds_back(self, dev, cid, now):
        if any(self.policy._waits_above(holder, dev.index) for holder in dev.holders):
            return Decision(self.name, WAITS, "the holder keeps it for a copy to a higher device")
        return None

    def end_turn(self, dev, cid, hold, first, now):
        if first is not None and self.policy._waits_above(cid, dev.index):
            return Keep(Decision(self.name, KEEPS, "for a copy to a higher device"))
        return None


class Quantum(Stage):
    """First come, first served, for one TQ (shorter for a light weight beside heavier
    waiters) while someone waits."""
    name = "quantum"
    for_waiters = True

    def end_turn(self, dev, cid, hold, first, now):
        if first is not None and now >= hold.quantum_end:
            return Decision(self.name, DROPPED, "quantum over", QUANTUM,
                            f"quantum over, {len(dev.waiters)} waiting")
        return None


# The stages, highest precedence first: where two would decide one question, the first does.
# Each policy makes its own of each (their state is that policy's).
STAGES: tuple[type[Stage], ...] = (GangStage, Memory, RoomStage, Copies, GapStage, Quantum,
                                   ShareStage, LimitStage)

# What a drop for each reason says, where no stage's own words came with it.
DROP_DECISIONS = {
    QUANTUM: Decision(Quantum.name, DROPPED, "quantum over", QUANTUM),
    SHARE: Decision(SHARES, DROPPED, "slice over for a waiter under its share", SHARE),
    GPU_LIMIT: Decision(LIMITS, DROPPED, "gpu limit reached", GPU_LIMIT),
    MEMORY: Decision(Memory.name, DROPPED, "the holders no longer fit", MEMORY),
    MODE: Decision(Memory.name, DROPPED, "the mode allows fewer holders", MODE),
    GAP: Decision(GapStage.name, DROPPED, "the lender is back from its gap", GAP),
}
# What no stage decided is first come, first served: a waiter whose turn in line has not come,
# a grant to the first in line or on a free device.
IN_LINE = Decision(Quantum.name, WAITS, "its turn in line")
FIRST_IN_LINE = Decision(Quantum.name, GRANTED, "first in line")
DEVICE_FREE = Decision(Quantum.name, GRANTED, "device free")


class Pipeline:
    """The stages of one policy, in precedence order, asked as the module says."""

    def __init__(self, policy: Any, stages: Sequence[type[Stage]] = STAGES):
        names = [stage.name for stage in stages]
        if len(set(names)) != len(names) or not all(names):
            raise ValueError(f"every stage needs a name of its own, not {names}")
        self.stages = tuple(stage(policy) for stage in stages)

    def of(self, kind: type[Stage]) -> Stage:
        """This policy's stage of that kind."""
        return next(stage for stage in self.stages if isinstance(stage, kind))

    def arrive(self, dev: Device, cid: int, now: float) -> Placement | None:
        return _first(stage.arrive(dev, cid, now) for stage in self.stages)

    def queue(self, dev: Device, cid: int, now: float) -> Placement | None:
        return _first(stage.queue(dev, cid, now) for stage in self.stages)

    def eligible_at(self, device: int, cid: int) -> float:
        """When the waiter may be granted: the first stage's word, else at once (-inf)."""
        at = _first(stage.eligible_at(device, cid) for stage in self.stages)
        return -math.inf if at is None else at

    def holds_back(self, dev: Device, cid: int, now: float) -> Decision:
        return _first(stage.holds_back(dev, cid, now) for stage in self.stages) or IN_LINE

    def grants(self, dev: Device, cid: int, wait: Wait, now: float) -> Decision:
        return _first(stage.grants(dev, cid, wait, now) for stage in self.stages) or \
            (FIRST_IN_LINE if wait.queued else DEVICE_FREE)

    def end_turn(self, dev: Device, cid: int, hold: Hold, first: int | None,
                 now: float) -> Decision | None:
        """The drop that ends the holder's turn now, if any: the first stage's, skipping those
        that end turns for waiters once a stage above them keeps the holder."""
        kept = False
        for stage in self.stages:
            if kept and stage.for_waiters:
                continue
            answer = stage.end_turn(dev, cid, hold, first, now)
            if isinstance(answer, Keep):
                kept = True
            elif answer is not None:
                return answer
        return None

    def forget_device(self, index: int) -> None:
        for stage in self.stages:
            stage.forget_device(index)

    def forget_client(self, cid: int) -> None:
        for stage in self.stages:
            stage.forget_client(cid)


def _first(answers):
    return next((answer for answer in answers if answer is not None), None)
