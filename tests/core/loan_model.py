"""Idle gaps lent (gap_rules.py) as the policy state machines model them.

Whether a holder's early release lends its gap is the core's decision, from its gap estimates
(gaps.py, tested on their own): the machine reads it from the core as the release goes in, as it
reads what a switch would move. What follows is modelled here: who holds on the loan, that the
lender back goes to the front and has them drop, that it gets the rest of its turn, and that who
gave the device back goes to the front again when it asks.
"""

from __future__ import annotations


class LoanModel:
    def __init__(self) -> None:
        self.loans: dict[int, tuple[int, float]] = {}  # device -> (lender, until)
        self.displaced: dict[int, dict[int, float]] = {}  # device -> {client: until}

    def active(self, device: int, now: float) -> tuple[int, float] | None:
        loan = self.loans.get(device)
        if loan is not None and now >= loan[1]:
            del self.loans[device]
            return None
        return loan

    def began(self, device: int, lender: int, until: float) -> None:
        self.loans[device] = (lender, until)

    def device_gone(self, device: int) -> None:
        """The core forgets a device nobody holds or waits for once no loan runs on it, and what
        it kept for the loan with it."""
        self.loans.pop(device, None)
        self.displaced.pop(device, None)

    def forget(self, cid: int) -> None:
        for device, (lender, _) in list(self.loans.items()):
            if lender == cid:
                del self.loans[device]
        for clients in self.displaced.values():
            clients.pop(cid, None)

    def asked(self, device: int, cid: int, now: float, queue: list, borrowers: list[int],
              lender_fits: bool) -> tuple[bool, list[int]]:
        """`cid` has just asked and is last in `queue` (entries [client, since, fresh]), which is
        reordered as the core does: whether it went ahead (a lender back, or who gave the device
        back to one: no share claim moves it then), and the borrowers (of `borrowers`, those
        holding on its loan and not dropped) that must now drop."""
        loan = self.active(device, now)
        entry = queue.pop()
        if loan is not None and loan[0] == cid:
            queue.insert(0, entry)
            if lender_fits:
                return True, []
            for other in borrowers:
                self.displaced.setdefault(device, {})[other] = loan[1]
            return True, borrowers
        until = self.displaced.get(device, {}).pop(cid, None)
        if until is None or now >= until:
            queue.append(entry)
            return False, []
        ahead = [e[0] for e in queue]
        place = ahead.index(loan[0]) + 1 if loan is not None and loan[0] in ahead else 0
        queue.insert(place, entry)
        return True, []

    def granted(self, device: int, cid: int, now: float, min_slice_s: float,
                tq: float) -> tuple[float | None, int | None]:
        """(its quantum if not TQ, its lender if it borrows) for a grant."""
        loan = self.active(device, now)
        if loan is None:
            return None, None
        if loan[0] == cid:
            del self.loans[device]
            return min(max(loan[1] - now, min_slice_s), tq), None
        return None, loan[0]
