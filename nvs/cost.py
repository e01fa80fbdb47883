"""What moving memory costs a handoff: pure arithmetic over bytes and measured rates.

The policy asks three questions of it: how many bytes must leave a device before a grant (room),
how long a move takes (so that a holder that moves is not revoked for it, and so that an idle
holder keeps the lock through gaps shorter than the swap its release would cause), and what the
link has shown it can do (the rates, measured from the clients' own reports).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .protocol import IDLE_HINT_FLOOR_MS

GB = 1e9
MIB = 1 << 20
# Until a device has shown its own: an H100's first move to the host (its host pages are new)
# and the page-fault rate back. Low on purpose: a deadline from them errs long, not short.
DEFAULT_TO_HOST_BPS = 3 * GB
DEFAULT_TO_DEVICE_BPS = 10 * GB
# Moves smaller than this are dominated by fixed costs and say nothing about the link.
MIN_SAMPLE_BYTES = 64 * MIB
# Below this a switch is as cheap as the handoff itself: the usual idle release applies.
CHEAP_SWITCH_S = 0.05
DEFAULT_IDLE_RELEASE_MS = IDLE_HINT_FLOOR_MS  # libnvs's default: a swap's hint is never below it
# Idle time before a holder hands a cheap switch to a waiter: past the gaps between the kernels of
# one piece of work (a training step, a notebook cell), short beside the work a waiter loses.
# Under IDLE_HINT_FLOOR_MS, so it is a ceiling: a client that releases sooner still does.
CONTENDED_IDLE_RELEASE_MS = 100


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

    def add(self, moved: int, seconds: float) -> None:
        if moved < MIN_SAMPLE_BYTES or seconds <= 0:
            return
        sample = moved / seconds
        self.bps = sample if not self.measured else (self.bps + sample) / 2
        self.measured = True

    def seconds(self, moved: int) -> float:
        return moved / self.bps if moved > 0 else 0.0


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

    def record(self, to_host: bool, moved: int, seconds: float) -> None:
        (self.to_host if to_host else self.to_device).add(moved, seconds)
        (self.moved_to_host if to_host else self.moved_to_device).add(moved, seconds)

    def switch_seconds(self, out: int, back: int) -> float:
        """A handoff that moves `out` bytes to the host and brings `back` bytes to the device."""
        return self.to_host.seconds(out) + self.to_device.seconds(back)

    def rates_view(self) -> dict:
        return {"to_host_gbps": round(self.to_host.bps / GB, 2),
                "to_device_gbps": round(self.to_device.bps / GB, 2),
                "measured": self.to_host.measured or self.to_device.measured}

    def moves_view(self) -> dict:
        return {"to_host": self.moved_to_host.view(), "to_device": self.moved_to_device.view()}


def idle_release_ms(switch_s: float, quantum_s: float, contended: bool = False) -> int:
    """The idle time after which a holder should hand the lock on; 0 for the client's own.
    Releasing pays the switch now and the holder's return pays it again, so only a gap longer
    than both is worth giving away; past the quantum the drop comes anyway. A cheap switch with
    someone waiting is worth making sooner than the client's own setting: every idle
    millisecond then is GPU time the waiter could have had."""
    if switch_s < CHEAP_SWITCH_S:
        return CONTENDED_IDLE_RELEASE_MS if contended else 0
    wanted = max(DEFAULT_IDLE_RELEASE_MS, round(2 * switch_s * 1000))
    return min(wanted, max(DEFAULT_IDLE_RELEASE_MS, round(quantum_s * 1000)))
