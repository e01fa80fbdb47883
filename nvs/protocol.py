"""The gemshare wire protocol, version 8: the Python definition of docs/protocol.md.

Pure bytes in, messages out; no sockets. `tests/protocol/test_c_header_agrees.py` checks that
`libnvs/wire/gemshare_protocol.h` says the same thing.
"""

from __future__ import annotations

import enum
import json
import struct
from dataclasses import dataclass, field
from typing import ClassVar

MAGIC = 0x52485347  # b"GSHR" read as a little-endian u32
VERSION = 8  # 2: DEVICE_UUID; 3: EVICT, MOVED, IDLE_HINT, DROP_LOCK's byte count;
#               4: REGISTER's label, LIMITS; 5: GANG; 6: PING, PONG; 7: MPS, REG_NO_MPS;
#               8: LOCK_RELEASED's idle_us, LIMITS' budget_used, REG_VIEW_ONLY
HEADER = struct.Struct("<IHHII")  # magic, version, type, length, seq
HEADER_SIZE = HEADER.size
MAX_PAYLOAD = 1 << 20
MAX_ERROR_TEXT = 1024
MAX_SEQ = 0xFFFFFFFF
# Control JSON is a flat object; deeper nesting only serves to exhaust a reader's stack.
MAX_JSON_DEPTH = 32


class MsgType(enum.IntEnum):
    REGISTER = 1
    REGISTERED = 2
    REQUEST_LOCK = 3
    LOCK_GRANTED = 4
    DROP_LOCK = 5
    LOCK_RELEASED = 6
    LOCK_REVOKED = 7
    SCHED_MODE = 8
    MEM_REPORT = 9
    CONTROL = 10
    CONTROL_REPLY = 11
    ERROR = 12
    DEVICE_UUID = 13
    EVICT = 14
    MOVED = 15
    IDLE_HINT = 16
    LIMITS = 17
    GANG = 18
    PING = 19
    PONG = 20
    MPS = 21


class Mode(enum.IntEnum):
    OFF = 0
    ON = 1
    AUTO = 2

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def from_label(cls, text: str) -> "Mode":
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"anti-thrash mode must be on, off or auto, not {text!r}") from None


class MpsPriority(enum.IntEnum):
    """An MPS client's priority, as CUDA_MPS_CLIENT_PRIORITY takes it: the GPU prefers normal
    clients' kernels to low ones' when both have work ready. Rules name it by its label."""
    NORMAL = 0
    LOW = 1  # below normal

    @property
    def label(self) -> str:
        return self.name.lower()


class ReleaseReason(enum.IntEnum):
    DROPPED = 1
    IDLE = 2
    REVOKED = 3


class ErrorCode(enum.IntEnum):
    PROTOCOL = 1
    TOO_MANY_CLIENTS = 2
    VERSION = 3
    PERMISSION = 4


REG_UNIFIED_MEMORY = 1 << 0
# The program's owner keeps it out of MPS (GEMSHARE_MPS=0): it runs as a context of its own.
REG_NO_MPS = 1 << 1
# The program only looks at the device (NVML: nvidia-smi, pynvml): it wants its LIMITS, never a
# lock, and is not shown among the scheduler's clients.
REG_VIEW_ONLY = 1 << 2
REG_KNOWN = REG_UNIFIED_MEMORY | REG_NO_MPS | REG_VIEW_ONLY  # any other bit is refused
# REQUEST_LOCK's flags: the work waiting for this device keeps the client's devices of lower
# index (their gates entered) until it is granted; the scheduler keeps those locks meanwhile.
REQUEST_KEEPING = 1 << 0
GRANT_AFTER_WAIT = 1 << 0
GRANT_SHARED = 1 << 1
GRANT_OTHERS_RAN = 1 << 2
EVICT_ALL = (1 << 64) - 1  # DROP_LOCK's evict_bytes: every managed byte on the device
# IDLE_HINT's idle_release_ms from this value up is a floor (keep the lock through shorter gaps: a
# handoff would swap memory); below it, a ceiling (release sooner: someone waits, a handoff is
# cheap). A client's own shorter or longer setting stands on the other side of each.
IDLE_HINT_FLOOR_MS = 250
MOVED_TO_HOST = 1 << 0
MOVED_DONE = 1 << 1
MOVED_FAILED = 1 << 2


class ProtocolError(Exception):
    """A peer broke the protocol; the connection it came on must be closed."""

    def __init__(self, reason: str, code: ErrorCode = ErrorCode.PROTOCOL):
        super().__init__(reason)
        self.code = code


def _text_field(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", errors="replace")


def _pack_text(text: str, size: int) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > size:  # cut on a character boundary so the field stays valid UTF-8
        raw = raw[:size].decode("utf-8", errors="ignore").encode("utf-8")
    return raw


class Fixed:
    """A message with a fixed binary layout: LAYOUT lists (field name, struct code) in order."""

    TYPE: ClassVar[MsgType]
    LAYOUT: ClassVar[tuple[tuple[str, str], ...]]

    @classmethod
    def struct(cls) -> struct.Struct:
        return struct.Struct("<" + "".join(code for _, code in cls.LAYOUT))

    @classmethod
    def offsets(cls) -> dict[str, int]:
        result, prefix = {}, "<"
        for name, code in cls.LAYOUT:
            result[name] = struct.calcsize(prefix)
            prefix += code
        return result

    def payload(self) -> bytes:
        values = []
        for name, code in self.LAYOUT:
            value = getattr(self, name)
            values.append(_pack_text(value, int(code[:-1])) if code.endswith("s") else value)
        return self.struct().pack(*values)

    @classmethod
    def parse(cls, payload: bytes):
        shape = cls.struct()
        if len(payload) != shape.size:
            raise ProtocolError(f"{cls.TYPE.name} payload is {len(payload)} bytes, not {shape.size}")
        values = shape.unpack(payload)
        kwargs = {}
        for (name, code), value in zip(cls.LAYOUT, values):
            kwargs[name] = _text_field(value) if code.endswith("s") else value
        return cls(**kwargs)


@dataclass(frozen=True)
class Register(Fixed):
    TYPE = MsgType.REGISTER
    LAYOUT = (("device", "I"), ("flags", "I"), ("process_name", "64s"),
              ("pod_namespace", "64s"), ("pod_name", "256s"), ("label", "64s"))
    device: int = 0
    flags: int = 0
    process_name: str = ""
    pod_namespace: str = ""
    pod_name: str = ""
    label: str = ""  # the program's GEMSHARE_LABEL

    def unknown_flags(self) -> str | None:
        """Why its flags are refused: bits this side does not know; None when it knows all."""
        unknown = self.flags & ~REG_KNOWN
        if not unknown:
            return None
        return (f"REGISTER flags 0x{self.flags:x} have bits this scheduler does not know "
                f"(0x{unknown:x}; it knows 0x{REG_KNOWN:x}): a library newer than the scheduler?")


@dataclass(frozen=True)
class Registered(Fixed):
    TYPE = MsgType.REGISTERED
    LAYOUT = (("client_id", "Q"), ("mode", "I"), ("tq_seconds", "I"))
    client_id: int
    mode: int
    tq_seconds: int


@dataclass(frozen=True)
class RequestLock(Fixed):
    TYPE = MsgType.REQUEST_LOCK
    LAYOUT = (("device", "I"), ("flags", "I"))
    device: int = 0
    flags: int = 0


@dataclass(frozen=True)
class LockGranted(Fixed):
    TYPE = MsgType.LOCK_GRANTED
    LAYOUT = (("device", "I"), ("flags", "I"), ("quantum_ms", "Q"))
    device: int
    flags: int
    quantum_ms: int


@dataclass(frozen=True)
class DropLock(Fixed):
    """Hand the lock on; first move `evict_bytes` of managed memory to the host (EVICT_ALL: all)."""
    TYPE = MsgType.DROP_LOCK
    LAYOUT = (("device", "I"), ("reserved", "I"), ("evict_bytes", "Q"))
    device: int = 0
    reserved: int = 0
    evict_bytes: int = 0


@dataclass(frozen=True)
class Evict(Fixed):
    """To a client that does not hold the device: move `bytes` to the host now, answer MOVED."""
    TYPE = MsgType.EVICT
    LAYOUT = (("device", "I"), ("reserved", "I"), ("bytes", "Q"))
    device: int = 0
    reserved: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class Moved(Fixed):
    """What a client moved (MOVED_DONE) or has moved so far (progress), and in how long."""
    TYPE = MsgType.MOVED
    LAYOUT = (("device", "I"), ("flags", "I"), ("bytes", "Q"), ("elapsed_us", "Q"))
    device: int = 0
    flags: int = 0
    bytes: int = 0
    elapsed_us: int = 0


@dataclass(frozen=True)
class IdleHint(Fixed):
    """While holding: release early only after this much idle time (0: the client's own); a
    drop now would ask to move `evict_bytes` out (a client may prepare for it)."""
    TYPE = MsgType.IDLE_HINT
    LAYOUT = (("device", "I"), ("idle_release_ms", "I"), ("evict_bytes", "Q"))
    device: int = 0
    idle_release_ms: int = 0
    evict_bytes: int = 0


@dataclass(frozen=True)
class Limits(Fixed):
    """The most the client may allocate on each device it uses (0: no limit), and what the other
    programs sharing that budget (its container's) have allocated; sent before REGISTERED when a
    limit applies, and whenever either changes."""
    TYPE = MsgType.LIMITS
    LAYOUT = (("memory_limit", "Q"), ("budget_used", "Q"))
    memory_limit: int = 0
    budget_used: int = 0


@dataclass(frozen=True)
class Mps(Fixed):
    """The client goes through the scheduler's NVIDIA MPS control daemon: before the driver
    starts it sets CUDA_MPS_PIPE_DIRECTORY to `pipe_directory`, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
    when `active_thread_percentage` is not 0, and CUDA_MPS_CLIENT_PRIORITY when `client_priority`
    is LOW. Sent before REGISTERED, or not at all. `client_priority` was a reserved zero before,
    which older clients ignore: the layout and the version stayed."""
    TYPE = MsgType.MPS
    LAYOUT = (("active_thread_percentage", "I"), ("client_priority", "I"),
              ("pipe_directory", "256s"))
    active_thread_percentage: int = 0  # 1 to 100; 0: as many as MPS gives
    client_priority: int = MpsPriority.NORMAL  # a MpsPriority; a client refuses any other value
    pipe_directory: str = ""


@dataclass(frozen=True)
class Gang(Fixed):
    """The client is one process of a distributed job: its locks are granted and taken back
    with those of the job's other processes on this node. Sent after REGISTER, before the
    client's first REQUEST_LOCK."""
    TYPE = MsgType.GANG
    LAYOUT = (("local_size", "I"), ("world_size", "I"), ("rank", "I"), ("reserved", "I"),
              ("name", "128s"))
    local_size: int = 0  # processes of the job on this node: the gang's size
    world_size: int = 0  # processes of the whole job
    rank: int = 0
    reserved: int = 0
    name: str = ""  # the job, the same for all its processes


@dataclass(frozen=True)
class Ping(Fixed):
    """A client that waits for a grant or holds a lock and has heard nothing for a while asks
    whether the scheduler still answers; the scheduler's I/O shell answers PONG at once."""
    TYPE = MsgType.PING
    LAYOUT = (("token", "Q"),)
    token: int = 0  # echoed in the PONG


@dataclass(frozen=True)
class Pong(Fixed):
    TYPE = MsgType.PONG
    LAYOUT = (("token", "Q"),)
    token: int = 0  # the PING's


@dataclass(frozen=True)
class LockReleased(Fixed):
    """`idle_us`: with RELEASE_IDLE, how long the device had been idle (no work queued or
    running) when the client let go; 0 otherwise."""
    TYPE = MsgType.LOCK_RELEASED
    LAYOUT = (("device", "I"), ("reason", "I"), ("idle_us", "Q"))
    device: int = 0
    reason: int = ReleaseReason.DROPPED
    idle_us: int = 0


@dataclass(frozen=True)
class LockRevoked(Fixed):
    TYPE = MsgType.LOCK_REVOKED
    LAYOUT = (("device", "I"), ("reserved", "I"))
    device: int = 0
    reserved: int = 0


@dataclass(frozen=True)
class SchedMode(Fixed):
    TYPE = MsgType.SCHED_MODE
    LAYOUT = (("mode", "I"), ("tq_seconds", "I"))
    mode: int
    tq_seconds: int


@dataclass(frozen=True)
class DeviceUuid(Fixed):
    """Which physical GPU the client's registered device is; sent once CUDA is up, before the
    client's first REQUEST_LOCK."""
    TYPE = MsgType.DEVICE_UUID
    LAYOUT = (("device", "I"), ("reserved", "I"), ("gpu_uuid", "48s"))
    device: int = 0
    reserved: int = 0
    gpu_uuid: str = ""  # as NVML writes it: "GPU-" and 8-4-4-4-12 hex digits


@dataclass(frozen=True)
class MemReport(Fixed):
    TYPE = MsgType.MEM_REPORT
    LAYOUT = (("device", "I"), ("reserved", "I"), ("allocated_bytes", "Q"),
              ("device_total_bytes", "Q"))
    device: int = 0
    reserved: int = 0
    allocated_bytes: int = 0
    device_total_bytes: int = 0


def json_depth(value) -> int:
    """How deeply lists and objects nest in a parsed JSON value (a scalar is 0); iterative, so
    that measuring cannot exhaust the stack either."""
    deepest, stack = 0, [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def _too_deep(kind: MsgType) -> str:
    return f"{kind.name} payload is JSON nested more than {MAX_JSON_DEPTH} levels deep"


@dataclass(frozen=True)
class Control:
    TYPE: ClassVar[MsgType] = MsgType.CONTROL
    body: dict = field(default_factory=dict)

    def payload(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":")).encode("utf-8")

    @classmethod
    def parse(cls, payload: bytes):
        try:
            body = json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ProtocolError(f"{cls.TYPE.name} payload is not JSON: {exc}") from None
        except RecursionError:  # nested past what the parser's own stack allows
            raise ProtocolError(_too_deep(cls.TYPE)) from None
        if json_depth(body) > MAX_JSON_DEPTH:  # so nothing downstream recurses through it
            raise ProtocolError(_too_deep(cls.TYPE))
        if not isinstance(body, dict):
            raise ProtocolError(f"{cls.TYPE.name} payload must be a JSON object")
        return cls(body)


@dataclass(frozen=True)
class ControlReply(Control):
    TYPE: ClassVar[MsgType] = MsgType.CONTROL_REPLY


@dataclass(frozen=True)
class Error:
    TYPE: ClassVar[MsgType] = MsgType.ERROR
    HEAD: ClassVar[struct.Struct] = struct.Struct("<II")
    code: int
    text: str

    def payload(self) -> bytes:
        return self.HEAD.pack(self.code, 0) + _pack_text(self.text, MAX_ERROR_TEXT)

    @classmethod
    def parse(cls, payload: bytes):
        if not cls.HEAD.size <= len(payload) <= cls.HEAD.size + MAX_ERROR_TEXT:
            raise ProtocolError(f"ERROR payload of {len(payload)} bytes is out of range")
        code, _ = cls.HEAD.unpack_from(payload)
        return cls(code, payload[cls.HEAD.size:].decode("utf-8", errors="replace"))


MESSAGES = {cls.TYPE: cls for cls in (
    Register, Registered, RequestLock, LockGranted, DropLock, LockReleased, LockRevoked,
    SchedMode, MemReport, Control, ControlReply, Error, DeviceUuid, Evict, Moved, IdleHint,
    Limits, Gang, Ping, Pong, Mps)}
FIXED_MESSAGES = {t: cls for t, cls in MESSAGES.items() if issubclass(cls, Fixed)}


def encode(message, seq: int = 0) -> bytes:
    """One whole frame: header and payload."""
    payload = message.payload()
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"{message.TYPE.name} payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    return HEADER.pack(MAGIC, VERSION, message.TYPE, len(payload), seq & MAX_SEQ) + payload


class FrameDecoder:
    """Turns a byte stream into (message, seq) pairs; raises ProtocolError on the first bad frame.

    `max_payload` lets a receiver that expects only small frames refuse big ones before buffering
    them.
    """

    def __init__(self, max_payload: int = MAX_PAYLOAD):
        self.max_payload = min(max_payload, MAX_PAYLOAD)
        self._buffer = bytearray()
        self._header: tuple[int, int, int] | None = None  # type, length, seq

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    @property
    def inside_frame(self) -> bool:
        """Whether part of a frame has arrived: some header bytes, or a whole header."""
        return self._header is not None or bool(self._buffer)

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def next(self):
        """The next whole message as (message, seq), or None until more bytes arrive."""
        if self._header is None:
            if len(self._buffer) < HEADER_SIZE:
                return None
            self._header = self._check_header(bytes(self._buffer[:HEADER_SIZE]))
            del self._buffer[:HEADER_SIZE]
        kind, length, seq = self._header
        if len(self._buffer) < length:
            return None
        payload = bytes(self._buffer[:length])
        del self._buffer[:length]
        self._header = None
        return MESSAGES[kind].parse(payload), seq

    def _check_header(self, raw: bytes) -> tuple[int, int, int]:
        magic, version, kind, length, seq = HEADER.unpack(raw)
        if magic != MAGIC:
            raise ProtocolError(f"bad magic 0x{magic:08x}: not a gemshare peer")
        if version != VERSION:
            raise ProtocolError(f"protocol version {version} is not supported (this side speaks "
                                f"{VERSION}): upgrade the older of libnvs.so and the scheduler",
                                ErrorCode.VERSION)
        if kind not in MESSAGES:
            raise ProtocolError(f"unknown message type {kind}")
        if length > self.max_payload:
            raise ProtocolError(f"{MsgType(kind).name} frame of {length} bytes exceeds the "
                                f"{self.max_payload}-byte limit")
        fixed = FIXED_MESSAGES.get(kind)
        if fixed is not None and length != fixed.struct().size:
            raise ProtocolError(f"{MsgType(kind).name} payload is {length} bytes, "
                                f"not {fixed.struct().size}")
        return kind, length, seq
