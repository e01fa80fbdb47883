"""The scheduler's settings and the one definition of what values they may take.

The command line, gemsharectl and the control `set` operation all validate through the checks
below (a `WholeNumber` per number, and `check_mode`), so a value refused in one place is refused
in the others with the same words.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .protocol import Mode

TQ_MIN, TQ_MAX = 1, 86400
DEFAULT_TQ = 30
DEFAULT_GRACE_MS = 10_000
GRACE_MS_MAX = 3_600_000
DEFAULT_MAX_CLIENTS = 1024
MAX_CLIENTS_LIMIT = 65536
DEFAULT_CONTROL_GROUP = "gemshare"
# Room set aside per lock holder for its CUDA context in mode auto; a context with the runtime's
# kernels loaded takes a few hundred MiB on recent GPUs.
DEFAULT_CONTEXT_RESERVE_MIB = 512
CONTEXT_RESERVE_MIB_MAX = 1 << 20  # 1 TiB: past any GPU's memory
CAPACITY_MIB_MAX = 1 << 20
# Control connections open at once, beyond --max-clients: an operator can still ask for status
# when the clients are at their limit, and no more replies than this are ever being built.
DEFAULT_MAX_CONTROL = 64
# What a client or gemsharectl ever sends is a few hundred bytes; nothing bigger is buffered.
DEFAULT_MAX_REQUEST_BYTES = 64 << 10
# Unsent bytes queued for one connection: room for two full-size status replies.
DEFAULT_OUTGOING_BYTES = 2 << 20
MODE_LABELS = ("on", "off", "auto")


def shortened(text: str, limit: int = 40) -> str:
    """Text from anyone as a message quotes it: cut short, so log lines stay lines."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def shown(value) -> str:
    """A refused value as messages quote it."""
    return shortened(repr(value))


@dataclass(frozen=True)
class WholeNumber:
    """A setting that is a whole number within bounds; `check` lets only such a value through,
    with the same words wherever it comes from."""
    name: str  # as messages call it
    low: int
    high: int
    unit: str = ""  # what it counts, when it counts something: "seconds", "MiB"

    def check(self, value) -> int:
        """`value` itself when valid; bools, floats and text are refused, as is a number out of
        bounds."""
        if isinstance(value, bool) or not isinstance(value, int) or \
                not self.low <= value <= self.high:
            raise self.refusal(value)
        return value

    def refusal(self, value) -> ValueError:
        """The error for a refused `value`: it says what is wanted."""
        of = f" of {self.unit}" if self.unit else ""
        return ValueError(f"{self.name} must be a whole number{of} from {self.low} to "
                          f"{self.high}, not {shown(value)}")


# One for each number in Settings, named as its field.
TQ = WholeNumber("tq", TQ_MIN, TQ_MAX, "seconds")
GRACE_MS = WholeNumber("grace", 1, GRACE_MS_MAX, "milliseconds")
MAX_CLIENTS = WholeNumber("max clients", 1, MAX_CLIENTS_LIMIT)
CONTEXT_RESERVE_MIB = WholeNumber("context reserve", 0, CONTEXT_RESERVE_MIB_MAX, "MiB")
CAPACITY_MIB = WholeNumber("capacity", 1, CAPACITY_MIB_MAX, "MiB")


def check_mode(value) -> Mode:
    """An anti-thrash mode given by its label: on, off or auto."""
    if not isinstance(value, str) or value not in MODE_LABELS:
        raise ValueError(f"anti_thrash must be one of on, off, auto, not {shown(value)}")
    return Mode.from_label(value)


def debug_from_environment() -> bool:
    return os.environ.get("GEMSHARE_DEBUG", "") not in ("", "0")


@dataclass
class Settings:
    socket: Path
    tq: int = DEFAULT_TQ
    mode: Mode = Mode.ON
    grace_ms: int = DEFAULT_GRACE_MS
    max_clients: int = DEFAULT_MAX_CLIENTS
    control_group: str = DEFAULT_CONTROL_GROUP
    context_reserve_mib: int = DEFAULT_CONTEXT_RESERVE_MIB
    capacity_mib: int | None = None  # auto's ceiling on each device's capacity; None: none
    debug: bool = False
    # Frames, and their bytes, waiting to be written to one connection; a peer that lets
    # either fill is dropped (a single frame is always taken, whatever its size).
    outgoing_queue: int = 256
    outgoing_bytes: int = DEFAULT_OUTGOING_BYTES
    # The largest payload the scheduler accepts in one incoming frame.
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_control: int = DEFAULT_MAX_CONTROL  # control connections open at once
    # A connection must say what it is (REGISTER or CONTROL) within this time, so that silent
    # connections cannot hold the connection slots.
    first_frame_seconds: float = 10.0
