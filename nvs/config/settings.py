"""The scheduler's settings and the one definition of what values they may take.

The command line, the config file, gemsharectl and the control operations all validate through
the checks below (a `WholeNumber` per whole number, a `PositiveNumber` per share or fraction, a
`Size` per byte count, a `Choice` per set of labels), so a value refused in one place is refused
in the others with the same words.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..core.model.container import CAP_OFF, COMPUTE_CAPS
from ..core.policy import DEFAULT_MIN_SLICE_MS
from ..protocol import Mode, MpsPriority

TQ_MIN, TQ_MAX = 1, 86400
DEFAULT_TQ = 30
DEFAULT_GRACE_MS = 10_000
GRACE_MS_MAX = 3_600_000
DEFAULT_MAX_CLIENTS = 1024
MAX_CLIENTS_LIMIT = 65536
# Without --max-clients-per-user, one user may hold this fraction of --max-clients: several
# users, and root (never held to it), always find room to register.
CLIENTS_PER_USER_SHARE = 4
DEFAULT_CONTROL_GROUP = "gemshare"
DEFAULT_CONFIG = "/etc/gemshare/gemshare.toml"
DEFAULT_STATE_DIR = "/var/lib/gemshare"
# Room set aside per lock holder for its CUDA context in mode auto; a context with the runtime's
# kernels loaded takes a few hundred MiB on recent GPUs.
DEFAULT_CONTEXT_RESERVE_MIB = 512
CONTEXT_RESERVE_MIB_MAX = 1 << 20  # 1 TiB: past any GPU's memory
CAPACITY_MIB_MAX = 1 << 20
MIN_SLICE_MS_MAX = 3_600_000
# A client's weight is its share of lock time beside others': past a million to one the shares
# are all or nothing anyway.
WEIGHT_MAX = 1_000_000
MEMORY_LIMIT_MIN = 1 << 20  # below a MiB no CUDA program starts: surely a missing unit
MEMORY_LIMIT_MAX = 1 << 50  # 1 PiB
# Control connections open at once, beyond --max-clients: an operator can still ask for status
# when the clients are at their limit, and no more replies than this are ever being built.
DEFAULT_MAX_CONTROL = 64
# View-only registrations (REG_VIEW_ONLY: nvidia-smi, pynvml) at once, beyond --max-clients and
# kept apart from it, so that however many a user opens, programs still find their slots; one
# user (root aside) may hold a quarter of them (CLIENTS_PER_USER_SHARE).
DEFAULT_MAX_VIEW_ONLY = 256
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

    def from_text(self, text: str) -> int:
        """A value as a command line gives it: decimal digits, perhaps signed, then checked;
        anything else ("1.5", "30s", "1e3") is refused in the same words."""
        if not re.fullmatch(r"\s*[+-]?\d+\s*", text):
            raise self.refusal(text)
        return self.check(int(text))

    @property
    def span(self) -> str:
        """What it takes, for help texts: "whole seconds from 1 to 86400"."""
        return f"whole {self.unit or 'number'} from {self.low} to {self.high}"

    def refusal(self, value) -> ValueError:
        """The error for a refused `value`: it says what is wanted."""
        of = f" of {self.unit}" if self.unit else ""
        return ValueError(f"{self.name} must be a whole number{of} from {self.low} to "
                          f"{self.high}, not {shown(value)}")


# One for each number in Settings, named as its field.
TQ = WholeNumber("tq", TQ_MIN, TQ_MAX, "seconds")
GRACE_MS = WholeNumber("grace", 1, GRACE_MS_MAX, "milliseconds")
MAX_CLIENTS = WholeNumber("max clients", 1, MAX_CLIENTS_LIMIT)
MAX_CLIENTS_PER_USER = WholeNumber("max clients per user", 1, MAX_CLIENTS_LIMIT)
CONTEXT_RESERVE_MIB = WholeNumber("context reserve", 0, CONTEXT_RESERVE_MIB_MAX, "MiB")
CAPACITY_MIB = WholeNumber("capacity", 1, CAPACITY_MIB_MAX, "MiB")
STAGING_MAX_MIB = WholeNumber("staging memory", 0, 1 << 30, "MiB")  # 1 PiB: past any host's
MIN_SLICE_MS = WholeNumber("min slice", 0, MIN_SLICE_MS_MAX, "milliseconds")


@dataclass(frozen=True)
class PositiveNumber:
    """A setting that is a number above 0 and at most `high`, whole or not."""
    name: str
    high: float

    def check(self, value) -> float:
        """`value` as a float when valid; bools, text, NaN and numbers out of bounds are
        refused."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not 0 < value <= self.high:
            raise self.refusal(value)
        return float(value)

    def refusal(self, value) -> ValueError:
        high = int(self.high) if self.high == int(self.high) else self.high
        return ValueError(f"{self.name} must be a number greater than 0 and at most {high}, "
                          f"not {shown(value)}")


# Binary units as memory is counted, and the decimal ones people write as well; any case.
SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
              "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40,
              "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*")


@dataclass(frozen=True)
class Size:
    """A setting that is a number of bytes: a whole number, or text such as "16GiB", "512 MiB"
    or "1.5G" (k, M, G, T and KiB..TiB are powers of 1024; kB, MB, GB, TB powers of 1000)."""
    name: str
    low: int
    high: int

    def check(self, value) -> int:
        """The bytes `value` stands for, within bounds; anything else is refused."""
        if isinstance(value, str):
            found = _SIZE.fullmatch(value.lower())
            if found is None or found[2] not in SIZE_UNITS:
                raise self.refusal(value)
            exact = float(found[1]) * SIZE_UNITS[found[2]]
            if not math.isfinite(exact):  # more digits than a float holds
                raise self.refusal(value)
            count = math.floor(exact)
        elif isinstance(value, int) and not isinstance(value, bool):
            count = value
        else:
            raise self.refusal(value)
        if not self.low <= count <= self.high:
            raise self.refusal(value)
        return count

    def refusal(self, value) -> ValueError:
        return ValueError(f"{self.name} must be a size such as 16GiB or 512MiB, from "
                          f"{_size_words(self.low)} to {_size_words(self.high)}, "
                          f"not {shown(value)}")


def _size_words(count: int) -> str:
    """A bound as a size message writes it: in the largest binary unit that divides it."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if count % SIZE_UNITS[unit.lower()] == 0:
            return f"{count // SIZE_UNITS[unit.lower()]} {unit}"
    return f"{count} bytes"


# What a configuration rule or gemsharectl gives one client.
WEIGHT = PositiveNumber("weight", WEIGHT_MAX)
GPU_LIMIT = PositiveNumber("gpu_limit", 1)
MEMORY_LIMIT = Size("memory_limit", MEMORY_LIMIT_MIN, MEMORY_LIMIT_MAX)


@dataclass(frozen=True)
class Choice:
    """A setting given by one of a few labels, each standing for a value: text exactly as
    written, not a number or a boolean."""
    name: str
    values: dict  # label -> value, in the order messages list them

    def check(self, value):
        """The value `value` labels; anything else is refused."""
        if not isinstance(value, str) or value not in self.values:
            raise ValueError(f"{self.name} must be one of {', '.join(self.values)}, "
                             f"not {shown(value)}")
        return self.values[value]


SM_SHARE = WholeNumber("sm_share", 1, 100, "percent")
MPS_PRIORITY = Choice("mps_priority", {priority.label: priority for priority in MpsPriority})
# The MPS control daemon's pipe directory travels in a fixed 256-byte field (protocol.py MPS).
MPS_PIPE_DIRECTORY_MAX = 255
# What a Unix socket's path may hold (sockaddr_un's sun_path, less its closing zero).
SOCKET_PATH_MAX = 107
# What a container's compute units cap besides its weight (docs/kubernetes.md).
COMPUTE_CAP = Choice("compute_cap", {cap: cap for cap in COMPUTE_CAPS})


def check_pipe_directory(value) -> str:
    """An MPS pipe directory as a config file or the command line names it: an absolute path
    that fits the MPS frame."""
    if not isinstance(value, str) or not value.startswith("/") or \
            len(value.encode("utf-8", errors="replace")) > MPS_PIPE_DIRECTORY_MAX or "\0" in value:
        raise ValueError(f"mps_pipe_directory must be an absolute path of at most "
                         f"{MPS_PIPE_DIRECTORY_MAX} bytes, not {shown(value)}")
    return value


def check_socket(name: str):
    """The check of the path of another daemon's Unix socket: an absolute path that fits a
    socket address, or "" for none."""
    def check(value) -> str:
        if not isinstance(value, str) or (value and not value.startswith("/")) or \
                len(value.encode("utf-8", errors="replace")) > SOCKET_PATH_MAX or "\0" in value:
            raise ValueError(f"{name} must be an absolute path of at most {SOCKET_PATH_MAX} "
                             f"bytes, or \"\" for none, not {shown(value)}")
        return value
    return check


CRI_SOCKET = check_socket("cri_socket")
POD_RESOURCES_SOCKET = check_socket("pod_resources_socket")
NODE_IDENTITY_SOCKET = check_socket("node_identity_socket")


def check_flag(name: str):
    """The check of a term that is true or false: TOML's booleans alone, not "yes" or 1."""
    def check(value) -> bool:
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false, not {shown(value)}")
        return value
    return check


ANTI_THRASH = Choice("anti_thrash", {label: Mode.from_label(label) for label in MODE_LABELS})


def check_mode(value) -> Mode:
    """An anti-thrash mode given by its label: on, off or auto."""
    return ANTI_THRASH.check(value)


def modes_starting(incomplete: str) -> list[str]:
    """The mode labels shell completion offers for what has been typed so far."""
    return [label for label in MODE_LABELS if label.startswith(incomplete.lower())]


def debug_from_environment() -> bool:
    return os.environ.get("GEMSHARE_DEBUG", "") not in ("", "0")


@dataclass
class Settings:
    socket: Path
    tq: int = DEFAULT_TQ
    mode: Mode = Mode.ON
    grace_ms: int = DEFAULT_GRACE_MS
    max_clients: int = DEFAULT_MAX_CLIENTS
    # Clients of one user (root aside) at once; None: a quarter of max_clients.
    max_clients_per_user: int | None = None
    control_group: str = DEFAULT_CONTROL_GROUP
    context_reserve_mib: int = DEFAULT_CONTEXT_RESERVE_MIB
    capacity_mib: int | None = None  # auto's ceiling on each device's capacity; None: none
    # The host memory all programs' staging may take together; None: what the host has free.
    staging_max_mib: int | None = None
    min_slice_ms: int = DEFAULT_MIN_SLICE_MS
    mps: bool = False  # run programs that may share a GPU through NVIDIA MPS
    # An MPS control daemon already running to adopt, by its pipe directory; None: our own.
    mps_pipe_directory: str | None = None
    # The container runtime's and the kubelet's sockets, to learn each program's container and
    # its units from (docs/kubernetes.md); None: the default where it exists, "": none.
    cri_socket: str | None = None
    pod_resources_socket: str | None = None
    # Or the node-identity service's, which asks them for it (a sidecar of the scheduler's
    # pod: gemshare-node-identity); None or "": none, the two above are asked directly.
    node_identity_socket: str | None = None
    compute_cap: str = CAP_OFF  # what a container's compute units cap besides its weight
    proc: Path = Path("/proc")  # where each program's cgroup is read (tests give their own)
    # The settings above that the command line named, as the config file names them: the rest
    # are defaults (status says which).
    given: frozenset[str] = frozenset()
    config: Path | None = None  # the config file to read and watch; None: none
    state_dir: Path | None = None  # where gemsharectl's changes are kept; None: not kept
    metrics: tuple[str, int] | None = None  # (host, port) serving Prometheus metrics; None: off
    debug: bool = False
    # Frames, and their bytes, waiting to be written to one connection; a peer that lets
    # either fill is dropped (a single frame is always taken, whatever its size).
    outgoing_queue: int = 256
    outgoing_bytes: int = DEFAULT_OUTGOING_BYTES
    # The largest payload the scheduler accepts in one incoming frame.
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_control: int = DEFAULT_MAX_CONTROL  # control connections open at once
    max_view_only: int = DEFAULT_MAX_VIEW_ONLY  # view-only registrations open at once
    # A connection must say what it is (REGISTER or CONTROL) within this time, so that silent
    # connections cannot hold the connection slots.
    first_frame_seconds: float = 10.0
    # A control connection that sends no request for this long is closed, so that connections
    # left open hold no control slot for good (gemsharectl opens one per request).
    control_idle_seconds: float = 60.0

    def view_only_per_user(self) -> int:
        """View-only registrations one user (root aside) may hold at once."""
        return max(1, self.max_view_only // CLIENTS_PER_USER_SHARE)

    def clients_per_user(self) -> int:
        """The per-user cap in force: as given, else a share of max_clients; never above it."""
        if self.max_clients_per_user is not None:
            return min(self.max_clients_per_user, self.max_clients)
        return max(1, self.max_clients // CLIENTS_PER_USER_SHARE)
