"""What moving memory costs a handoff: pure arithmetic over bytes and measured rates.

The policy asks three questions of it: how many bytes must leave a device before a grant (room),
how long a move takes (so that a holder that moves is not revoked for it, and so that an idle
holder keeps the lock through gaps shorter than the swap its release would cause), and what the
link has shown it can do (the rates, measured from the clients' own reports).

The rates set every client's deadlines and idle hints, but they come from what clients say, and
the scheduler cannot check a move's time. So no single report can move them far: the policy
counts only the bytes it asked of the client (credit.py), a report faster than the host link
can carry (LINK_CEILING_BPS) is not counted, and after its first move one move pulls a rate at
most MAX_STEP times up or down. A client that lies can then at worst make the link look as fast
as that ceiling, and never infinitely fast.

Until a device has moved memory, two guesses stand in for its rates. Deadlines (how long a holder
may take to move out before it is revoked) use the low defaults, so that they err long. What a
switch or a loan is expected to cost (the idle hints, the minimum slice, whether a gap is lent)
uses what the device's host link can carry where NVML says (its PCIe generation and width,
LINK_EFFICIENCY of it), else the defaults too: a guess too high there costs one handoff, whose
moves then teach the real rates; the low defaults kept every gap from being lent, and every idle
holder on the lock, until the end of a turn had shown the link.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...protocol import IDLE_HINT_FLOOR_MS

GB = 1e9
MIB = 1 << 20
# Until a device has shown its own: an H100's first move to the host (its host pages are new)
# and the page-fault rate back. Low on purpose: a deadline from them errs long, not short.
DEFAULT_TO_HOST_BPS = 3 * GB
DEFAULT_TO_DEVICE_BPS = 10 * GB
# Moves smaller than this are dominated by fixed costs and say nothing about the link.
MIN_SAMPLE_BYTES = 64 * MIB
# The host link of H100 and H200 cards, PCIe 5.0 x16, carries 63 GB/s each way (32 GT/s on 16
# lanes, 128b/130b coding); their fastest moves measured 52 GB/s out and 50 back. A report past
# it moved nothing across the link (pages that were not on the device) or is false. A faster link
# (Grace Hopper's NVLink-C2C) has its moves refused and keeps slower rates: deadlines err long.
LINK_CEILING_BPS = 64 * GB
# After the first, one move counts as at most this many times the estimate, and at least its
# inverse: a false report must be asked of its client again and again to move a rate far.
MAX_STEP = 4
# Of what the PCIe link carries, what bulk moves of managed memory reach: an H200's 63 GB/s link
# moved 45-53 GB/s each way (docs/benchmarks.md).
LINK_EFFICIENCY = 0.75
# Below this a switch is as cheap as the handoff itself: the usual idle release applies.
CHEAP_SWITCH_S = 0.05
DEFAULT_IDLE_RELEASE_MS = IDLE_HINT_FLOOR_MS  # libnvs's default: a swap's hint is never below it
# Idle time before a holder hands a cheap switch to a waiter: past the gaps between the kernels of
# one piece of work (a training step, a notebook cell), short beside the work a waiter loses.
# Under IDLE_HINT_FLOOR_MS, so it is a ceiling: a client that releases sooner still does.
CONTENDED_IDLE_RELEASE_MS = 100
# Idle time before a holder lets go when everyone's memory fits together (`auto`) and nobody
# waits: a day, a floor, so in effect never. Whoever asks is granted beside it anyway, so a
# release gains nobody anything, and costs the holder a round trip for its next first launch
# (an inference server's first token after an idle span). A waiter changes the hint at once.
ALL_FIT_IDLE_RELEASE_MS = 86_400_000


def margin(capacity: int) -> int:
    """Room asked for beyond the exact excess: moves go in 2 MiB pages, and allocators keep some
    slack that no report shows."""
    return max(256 * MIB, capacity // 64)


def room_to_make(capacity: int | None, resident: int, incoming: int, contexts: int,
                 reserve: int) -> int:
    """Bytes that must leave the device so that `incoming` more bytes fit beside the `resident`
    ones with a context reserve for each of `contexts` holders; 0 when they fit already or the
    capacity is unknown (page faults then do the moving)."""
    if capacity is None:
        return 0
    over = resident + incoming + contexts * reserve - capacity
    return over + margin(capacity) if over > 0 else 0


@dataclass
class Rate:
    """One direction's rate in bytes per second: a moving average of the reported moves, each new
    one weighing 1/2, so that a first slow move (new host pages) is soon forgotten."""
    bps: float
    measured: bool = False

    def add(self, moved: int, seconds: float) -> bool:
        """Counts one move; False when it was refused, being faster than any host link. Moves too
        small or untimed to say anything are passed over as fine."""
        if moved < MIN_SAMPLE_BYTES or seconds <= 0:
            return True
        sample = moved / seconds
        if sample > LINK_CEILING_BPS:
            return False
        if self.measured:
            sample = min(max(sample, self.bps / MAX_STEP), self.bps * MAX_STEP)
        # The first move replaces the default outright: the default measured nothing.
        self.bps = sample if not self.measured else (self.bps + sample) / 2
        self.measured = True
        return True

    def seconds(self, moved: int) -> float:
        return moved / self.bps if moved > 0 else 0.0

    def expected_seconds(self, moved: int, prior_bps: float | None) -> float:
        """What a move is expected to take: at the measured rate, else at the link's prior where
        there is one, else at the default."""
        if self.measured or prior_bps is None or moved <= 0:
            return self.seconds(moved)
        return moved / prior_bps


@dataclass
class Tally:
    """What was moved in one direction, for status and benchmarks."""
    count: int = 0
    bytes: int = 0
    seconds: float = 0.0

    def add(self, moved: int, seconds: float) -> None:
        self.count += 1
        self.bytes += moved
        self.seconds += seconds

    def view(self) -> dict:
        return {"count": self.count, "bytes": self.bytes, "seconds": round(self.seconds, 3)}


@dataclass
class Link:
    """A device's link to the host, as its moves have shown it."""
    to_host: Rate = field(default_factory=lambda: Rate(DEFAULT_TO_HOST_BPS))
    to_device: Rate = field(default_factory=lambda: Rate(DEFAULT_TO_DEVICE_BPS))
    moved_to_host: Tally = field(default_factory=Tally)
    moved_to_device: Tally = field(default_factory=Tally)
    # What bulk moves over the host link are expected to reach each way (link_prior_bps), where
    # NVML says what the link is: a switch's expected cost before moves have shown the rates.
    prior_bps: float | None = None

    def record(self, to_host: bool, moved: int, seconds: float,
               counted: int | None = None) -> bool:
        """A move of `moved` bytes in `seconds`, of which `counted` (all by default) may teach
        the rate: fewer bytes in the same time make it slower, the side deadlines may err on.
        False when the rate refused it (Rate.add); the tally always has it."""
        (self.moved_to_host if to_host else self.moved_to_device).add(moved, seconds)
        rate = self.to_host if to_host else self.to_device
        return rate.add(moved if counted is None else counted, seconds)

    def switch_seconds(self, out: int, back: int) -> float:
        """What a handoff that moves `out` bytes to the host and brings `back` bytes to the
        device is expected to take (deadlines use the rates' own seconds, which err long)."""
        return self.to_host.expected_seconds(out, self.prior_bps) + \
            self.to_device.expected_seconds(back, self.prior_bps)

    def loan_seconds(self, room: int, fetch: int, lenders: int | None = None) -> float:
        """A holder's idle gap lent to a waiter and taken back: `room` bytes out and the
        waiter's `fetch` bytes in, then the lender's bytes that room took (`lenders`, by default
        all of it) out of the waiter and back in."""
        back = room if lenders is None else lenders
        return self.switch_seconds(room, fetch) + self.switch_seconds(back, back)

    def rates_view(self) -> dict:
        return {"to_host_gbps": round(self.to_host.bps / GB, 2),
                "to_device_gbps": round(self.to_device.bps / GB, 2),
                "measured": self.to_host.measured or self.to_device.measured}

    def moves_view(self) -> dict:
        return {"to_host": self.moved_to_host.view(), "to_device": self.moved_to_device.view()}


# Bytes per second per lane of each PCIe generation, after line coding (8b/10b up to gen 2,
# 128b/130b from gen 3; gen 6 counted as gen 5 doubled).
PCIE_LANE_BPS = {1: 0.25 * GB, 2: 0.5 * GB, 3: 0.985 * GB, 4: 1.969 * GB, 5: 3.938 * GB,
                 6: 7.877 * GB}


def link_prior_bps(generation: int, width: int) -> float | None:
    """What bulk moves over a PCIe link of this generation and width are expected to reach;
    None for values no PCIe link has."""
    lane = PCIE_LANE_BPS.get(generation)
    if lane is None or not 1 <= width <= 32:
        return None
    return min(lane * width, LINK_CEILING_BPS) * LINK_EFFICIENCY


def idle_release_ms(switch_s: float, quantum_s: float, contended: bool = False,
                    all_fit: bool = False) -> int:
    """The idle time after which a holder should hand the lock on; 0 for the client's own.
    Releasing pays the switch now and the holder's return pays it again, so only a gap longer
    than both is worth giving away; past the quantum the drop comes anyway. A cheap switch with
    someone waiting is worth making sooner than the client's own setting: every idle
    millisecond then is GPU time the waiter could have had. With nobody waiting and everyone's
    memory fitting together (`all_fit`), there is nobody to hand it to."""
    if all_fit and not contended:
        return ALL_FIT_IDLE_RELEASE_MS
    if switch_s < CHEAP_SWITCH_S:
        return CONTENDED_IDLE_RELEASE_MS if contended else 0
    wanted = max(DEFAULT_IDLE_RELEASE_MS, round(2 * switch_s * 1000))
    return min(wanted, max(DEFAULT_IDLE_RELEASE_MS, round(quantum_s * 1000)))
