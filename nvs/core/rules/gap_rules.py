"""The rules of idle gaps, as part of the policy core: a holder whose idle gaps outlast what
handing the device to the waiter and back would move lends each gap, and takes the device back
when it asks again.

- Lending: while someone waits, a holder whose expected gap (gaps.py) is longer than the loan's
  moves (cost.Link.loan_seconds, at the measured rates) is hinted to let go soon after its work
  (IDLE_HINT below the floor), so its early release starts a loan: the waiter is granted as after
  any release, for its usual quantum.
- Coming back: while its turn would have lasted, the lender that asks again goes to the front of
  the queue, and whoever holds the device on its loan is dropped at once (unless, in `auto`, the
  lender fits beside it by now), moving out the room the lender's memory needs; the lender is
  granted the rest of its turn (at least a minimum slice). The holder it displaced asks again
  at the front too (behind the lender, while that one waits), as it would have been next.
- Once the lender's turn would have ended the loan is over: who holds then goes on with its own
  turn, and the lender asks again like anyone.
- A holder filling a gap is hinted to let go soon after its own work as well: the lender's return
  finds the device free, and its own gaps are seen. The loan outlasts such a release (the device
  is not forgotten while lent): who asks next, the borrower again included, borrows too.

Gangs neither lend nor borrow (their members hold together), and a device lends only while it
has one holder: `on`, or `auto` among programs that do not fit together.

The stage `gaps` of the decision pipeline (pipeline.py): it keeps the loans, and reads the
policy's devices, clients, gap estimates and move rates. The arithmetic is in gaps.py and
cost.py.
"""

from __future__ import annotations

from ..model.actions import Log
from ..model.decision import GRANTED, WAITS, Decision
from ..model.stage import Placement, Stage
from ..model.state import Device, Hold, Loan
from ..model.text import GAP
from .cost import CONTENDED_IDLE_RELEASE_MS
from .gaps import worth_lending


class GapStage(Stage):
    name = "gaps"

    def __init__(self, policy):
        super().__init__(policy)
        self.loans: dict[int, Loan] = {}  # device -> its loan (one that is over may linger)
        # device -> {client: until when it goes to the front of the queue when it asks again}:
        # it gave the device back to a lender, and would otherwise have been next
        self.displaced: dict[int, dict[int, float]] = {}

    # ----- the stage's answers ----------------------------------------------------------------

    def arrive(self, dev: Device, cid: int, now: float) -> Placement | None:
        words, actions, placed = self._returning(dev, cid, now)
        if placed is None:
            return None
        return Placement(Decision(self.name, WAITS, placed), words, actions)

    def holds_back(self, dev: Device, cid: int, now: float) -> Decision | None:
        loan = self.loan_at(dev.index, now)
        if loan is not None and loan.lender == cid:
            return Decision(self.name, WAITS, "back from its gap, for the borrower to give way")
        if loan is not None and loan.lender in dev.waiters:
            order = list(dev.waiters)
            if order.index(loan.lender) < order.index(cid):
                return Decision(self.name, WAITS, "behind a lender back from its gap")
        return None

    def grants(self, dev: Device, cid: int, wait, now: float) -> Decision | None:
        loan = self.loan_at(dev.index, now)
        if loan is None or self.policy.gangs.of(cid) is not None:
            return None
        if loan.lender == cid:
            return Decision(self.name, GRANTED, "back from its idle gap")
        return Decision(self.name, GRANTED, "in a lender's idle gap")

    def forget_device(self, index: int) -> None:
        self.loans.pop(index, None)
        self.displaced.pop(index, None)

    def forget_client(self, cid: int) -> None:
        for index, loan in list(self.loans.items()):
            if loan.lender == cid:
                del self.loans[index]  # nobody comes back: who holds on it keeps its turn
        for displaced in self.displaced.values():
            displaced.pop(cid, None)

    # ----- loans ------------------------------------------------------------------------------

    def loan_at(self, device: int, now: float) -> Loan | None:
        """The device's loan, while the lender's turn would still last."""
        loan = self.loans.get(device)
        return loan if loan is not None and now < loan.until else None

    def _loan(self, dev: Device, now: float) -> Loan | None:
        """The device's loan, while the lender's turn would still last; one that is over is
        forgotten."""
        loan = self.loan_at(dev.index, now)
        if loan is None:
            self.loans.pop(dev.index, None)
        return loan

    def loan_seconds(self, dev: Device, borrower: int, lender: int | None, now: float) -> float:
        """What lending holder `lender`'s gap to `borrower` and taking it back would move, in
        seconds at the device's measured rates: the borrower's memory in and the room for it
        out, and, on the lender's return, what of the lender's own memory that room took, out of
        the borrower and back in. Room taken from other idle programs costs the lender nothing
        (with none about, as for a pair, the room is all the lender's)."""
        room_rules = self.policy.room_rules
        room = room_rules.room_for(dev, [borrower], len(dev.holders))
        plan = room_rules.eviction_plan(dev, room, {borrower}, now, released=lender)
        lenders = sum(size for cid, size in plan if cid == lender)
        fetch = room_rules.to_fetch(dev.index, borrower)
        return room_rules.link(dev.index).loan_seconds(room, fetch, lenders)

    def _gap_worth_giving(self, dev: Device, cid: int, contender: int | None,
                          now: float) -> bool:
        """Whether holder `cid`'s idle gaps are worth handing to `contender`, the first waiter
        (worth_lending); never within a gang, whose members hold together."""
        gangs = self.policy.gangs
        if contender is None or gangs.of(cid) is not None or gangs.of(contender) is not None:
            return False
        return worth_lending(self.policy.gaps.lendable(cid, dev.index),
                             self.loan_seconds(dev, contender, cid, now))

    def _lends(self, dev: Device, cid: int, contender: int | None, now: float) -> bool:
        """Whether holder `cid`, the only one, hands its next idle gap to the first waiter."""
        return len(dev.holders) == 1 and self._gap_worth_giving(dev, cid, contender, now)

    def _yields(self, dev: Device, cid: int, contender: int | None, now: float) -> bool:
        """Whether holder `cid`, one of several (`auto`), lets go soon after its work for the
        first waiter, which does not fit beside the holders: as a single holder lends its gaps,
        but with no loan (the device stays shared with the others, and the one that let go asks
        again like anyone)."""
        return len(dev.holders) > 1 and contender is not None and \
            not self.policy._fits_beside_holders(dev, contender) and \
            self._gap_worth_giving(dev, cid, contender, now)

    def gap_hint(self, dev: Device, cid: int, hold: Hold, contender: int | None,
                 now: float) -> int | None:
        """The idle hint of a holder that lends its gap, fills another's or, sharing the device,
        makes way (let go soon after the work); None for the usual one (room_rules.py)."""
        loan = self._loan(dev, now)
        borrowing = loan is not None and hold.lender == loan.lender
        # A borrower lends nothing: the device is the lender's to come back to.
        hold.lending = not borrowing and self._lends(dev, cid, contender, now)
        if hold.lending or borrowing or self._yields(dev, cid, contender, now):
            return CONTENDED_IDLE_RELEASE_MS
        return None

    def lend(self, dev: Device, cid: int, hold: Hold, now: float) -> list:
        """A holder let go early: if its hint lent the gap, a loan begins, for the rest of its
        turn."""
        if not hold.lending or hold.dropped_at is not None or hold.quantum_end <= now or \
                self.policy.throttle_rules.throttled(cid, dev.index):
            return []
        self.loans[dev.index] = Loan(cid, hold.quantum_end)
        gap = self.policy.gaps.lendable(cid, dev.index)
        gap_words = "none seen yet" if gap is None else f"{gap:.3f} s"
        return [Log(f"lend {self.policy.clients[cid]}: device {dev.index}, idle; its gaps last "
                    f"{gap_words}, {hold.quantum_end - now:.3f} s of its turn left")]

    def loan_terms(self, dev: Device, cid: int, turn: float,
                   now: float) -> tuple[float, int | None, str]:
        """(quantum, lender, log words) for a grant of quantum `turn`: a lender back gets the
        rest of its turn (no more than `turn`, which a shorter TQ set since may have cut), and
        the loan ends; anyone else granted during a loan borrows the device, which it gives back
        if the lender asks again before its turn would have ended."""
        loan = self._loan(dev, now)
        if loan is None or self.policy.gangs.of(cid) is not None:
            return turn, None, ""
        if loan.lender == cid:
            del self.loans[dev.index]
            rest = min(max(loan.until - now, self.policy.min_slice_ms / 1000), turn)
            return rest, None, f", back from its idle gap, {rest:.3f} s of its turn left"
        return turn, loan.lender, f", in the idle gap of {self.policy.clients[loan.lender]}"

    def _returning(self, dev: Device, cid: int, now: float) -> tuple[str, list, str | None]:
        """A request, just queued, from a lender back from its gap (to the front, and whoever
        holds on its loan drops) or from a client that gave the device back to one (to the
        front, behind a lender still waiting): words for the request's log line, the drops,
        and where it was placed (None: it was not, it is no one coming back)."""
        policy = self.policy
        loan = self._loan(dev, now)
        if loan is not None and loan.lender == cid:
            _queue_behind(dev, cid, None)
            actions = []
            # Those on its loan make way only for a lender that may run now and needs the room.
            if policy._eligible_at(cid, dev.index) <= now and \
                    not policy._fits_beside_holders(dev, cid):
                for other, hold in list(dev.holders.items()):
                    if hold.lender == cid and hold.dropped_at is None:
                        self.displaced.setdefault(dev.index, {})[other] = loan.until
                        actions += policy._drop(dev, other, now, f"{policy.clients[cid]} is back "
                                                "from its idle gap", GAP)
            return (f", back from its idle gap, {loan.until - now:.3f} s of its turn left",
                    actions, "first: back from its idle gap")
        until = self.displaced.get(dev.index, {}).pop(cid, None)
        if until is None or now >= until:
            return "", [], None
        _queue_behind(dev, cid, loan.lender if loan is not None else None)
        return (", first again: it gave the device back to the client whose gap it filled", [],
                "first again: it gave the device back to a lender")


def _queue_behind(dev: Device, cid: int, ahead: int | None) -> None:
    """Waiter `cid`, just arrived, goes ahead of every other waiter, or of those behind `ahead`
    while that one waits (model/state.py's Queue keeps that fact and works the order out). Those
    it passes have their room asked again when their turn comes: what was made for them may
    have gone to it."""
    order = [other for other in dev.waiters if other != cid]
    behind = order[order.index(ahead) + 1 if ahead in order else 0:]
    for other in behind:
        dev.waiters[other].room_asked = False
    dev.waiters.go_ahead(cid, behind)
