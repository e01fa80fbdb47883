"""Clients that take the GPU back right after giving it up, as part of the policy core: they are
throttled, and the memory moved for them counts against their own share.

A client that lets the lock go by itself and asks again sooner than QUICK_RETURN_S has given
nobody anything: whoever was granted in between moved its memory back for nothing, and will
move it out again. Once a client has done so QUICK_RETURNS times in a row on a device, it is
throttled there until it next comes back later than that:

- it no longer goes ahead of others for being under its share, nor cuts a holder's turn short
  (share_rules.py), and its early releases lend nothing (gap_rules.py): it waits its turn first
  come first served;
- the memory moved out for its grants (the room a holder's drop moves, the EVICTs of others)
  is charged to it, at what the move out and the way back take on the device's link: a charge
  counts as lock time in its weighted usage (share_rules.py) and decays as that does
  (usage.py), so that once it is no longer throttled it is not owed the device for the GPU time
  others lost to it. Charges are kept apart from lock time, which stays what the holds made it
  (gpu_limit and status read that).

The threshold is the idle time after which a contended holder is told to let go
(cost.CONTENDED_IDLE_RELEASE_MS): a program that comes back sooner would have been told to
keep the lock through that gap. Programs whose bursts of work come closer together a couple of
times (a notebook's cells in threes) stay below QUICK_RETURNS; the abuse it answers is a
client holding 50 ms and asking again at once, 38 times, which made a program beside it take
4.1 times as long.

ThrottleRules, beside the decision pipeline (pipeline.py), reads the policy's clients, gaps and
links; the bookkeeping is QuickReturns below, the policy's `returns`.
"""

from __future__ import annotations

from ...model.actions import Log
from ..cost import CONTENDED_IDLE_RELEASE_MS
from ..usage import Usage

QUICK_RETURN_S = CONTENDED_IDLE_RELEASE_MS / 1000
QUICK_RETURNS = 3  # in a row on one device: then it is throttled there


class QuickReturns:
    """Each client's quick returns in a row, by (client, device)."""

    def __init__(self) -> None:
        self._streaks: dict[tuple[int, int], int] = {}
        self.charges = Usage()  # the seconds of moves charged to each client, decaying

    def asked(self, cid: int, device: int, quick: bool) -> bool:
        """A request: `quick` when it came within QUICK_RETURN_S of the client letting the
        device go by itself. Whether this request made it throttled."""
        key = (cid, device)
        before = self._streaks.get(key, 0)
        if not quick:
            self._streaks.pop(key, None)
            return False
        self._streaks[key] = before + 1
        return before + 1 == QUICK_RETURNS

    def throttled(self, cid: int, device: int) -> bool:
        return self._streaks.get((cid, device), 0) >= QUICK_RETURNS

    def of_client(self, cid: int) -> list[int]:
        """The devices where the client is throttled."""
        return sorted(device for (owner, device), streak in self._streaks.items()
                      if owner == cid and streak >= QUICK_RETURNS)

    def charged(self, cid: int, device: int, now: float) -> float:
        return self.charges.read(cid, device, now)

    def forget(self, cid: int) -> None:
        for key in [key for key in self._streaks if key[0] == cid]:
            del self._streaks[key]
        self.charges.forget(cid)


class ThrottleRules:
    def __init__(self, policy):
        self.policy = policy

    def count_return(self, cid: int, device: int, now: float) -> list:
        """A request: counted as a quick return when the client's last hold there ended by its
        own release less than QUICK_RETURN_S ago; the log line that says it is throttled, once
        it becomes so."""
        client = self.policy.clients[cid]
        ended = self.policy.gaps.held_until(cid, device)
        quick = client.let_go.get(device, False) and ended is not None and \
            now - ended < QUICK_RETURN_S
        if not self.policy.returns.asked(cid, device, quick):
            return []
        return [Log(f"throttle {client}: device {device}, asked again within "
                    f"{QUICK_RETURN_S * 1000:.0f} ms of letting it go, {QUICK_RETURNS} times in a "
                    "row: it waits its turn, and the moves made for it count as its own use")]

    def throttled(self, cid: int, device: int) -> bool:
        return self.policy.returns.throttled(cid, device)

    def charge_moves(self, beneficiary: int | None, device: int, size: int,
                      now: float) -> None:
        """`size` bytes move out of the device for `beneficiary`'s grant: a throttled client
        is charged what they take out now and back later."""
        if beneficiary is None or size <= 0 or not self.throttled(beneficiary, device):
            return
        seconds = self.policy.room_rules.link(device).switch_seconds(size, size)
        self.policy.returns.charges.meter(beneficiary, device).charge(seconds, now)
