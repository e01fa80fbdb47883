"""More than 10,000 random, odd and broken frames over many connections; the scheduler survives.

A seeded generator makes the run repeatable. Each connection opens as a client or a control
connection, or with nonsense, then sends frames that are valid but odd (random fields, reserved
bits set, huge sizes, unknown reasons, UUIDs of any bytes, JSON with odd values or nested a few
levels), which the scheduler must take without closing, and ends with one frame that may be
anything: valid, mutated, of the wrong type, for a huge device, or deeply nested JSON. Several
threads send at once.

Only frames whose send completed are counted, and each connection checks that the scheduler
closed it (if at all) for its last frame, with the ERROR that frame deserves: so every counted
frame was read by the scheduler. Afterwards the scheduler process is still running, answers
status, has forgotten every fuzzing client and logged no traceback.
"""

import json
import random
import socket
import struct
import threading
import time

from gemshare_nvs import protocol as p
from gemshare_nvs.config.settings import DEFAULT_MAX_REQUEST_BYTES
from gemshare_nvs.core.model.device_identity import MAX_DEVICES
from gemshare_nvs.wire.conversation import CLIENT, CONTROL, next_kind

SEED = 20240611
THREADS = 4
CONNECTIONS_PER_THREAD = 250
ODD_FRAMES = (8, 24)  # valid but odd frames per connection, before its last one
U32 = (0, 1, 2, 7, 63, 1023, 1024, 2**31, 2**32 - 1)
UUIDS = [f"GPU-{n:08x}-0000-0000-0000-{n:012x}" for n in range(6)]
ANY = None  # either outcome is right: it depends on what other connections did first


def random_text(rng: random.Random, limit: int) -> str:
    alphabet = "abc\0\n\t\u00e9\u4e2d\U0001f600"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(limit)))


def nested(depth: int, leaf=1):
    for level in range(depth):
        leaf = [leaf] if level % 2 else {"k": leaf}
    return leaf


def random_control(rng: random.Random) -> dict:
    body = {"op": rng.choice(["status", "status", "set", "set", "nope", 5, None])}
    if rng.random() < 0.6:
        body["tq"] = rng.choice([1, 30, 86400, 0, -1, 86401, 2.5, True, "30", None, [1],
                                 nested(20)])
    if rng.random() < 0.6:
        body["anti_thrash"] = rng.choice(["on", "off", "auto", "ON", "", 1, None, nested(25)])
    if rng.random() < 0.1:
        body[random_text(rng, 5)] = random_text(rng, 5)
    return body


def random_u32(rng: random.Random) -> int:
    return rng.choice(U32) if rng.random() < 0.05 else rng.randrange(4)


def odd_client_frame(rng: random.Random, device: int) -> bytes:
    """A client message the scheduler must accept, however odd its fields."""
    message = rng.choice([
        lambda: p.RequestLock(device, random_u32(rng)),
        lambda: p.LockReleased(random_u32(rng) % MAX_DEVICES,
                               rng.choice([0, 1, 2, 3, 5, 2**32 - 1])),
        lambda: p.MemReport(rng.choice([device, rng.randrange(MAX_DEVICES), MAX_DEVICES - 1]),
                            random_u32(rng), rng.randrange(2**64), rng.randrange(2**64)),
        lambda: p.DeviceUuid(rng.choice([device, device, random_u32(rng)]), random_u32(rng),
                             rng.choice(UUIDS + ["", "GPU-", random_text(rng, 20)])),
    ])()
    frame = bytearray(p.encode(message, rng.randrange(2**32)))
    if isinstance(message, p.DeviceUuid) and rng.random() < 0.3:  # any bytes, even not UTF-8
        for _ in range(rng.randrange(1, 6)):
            frame[p.HEADER_SIZE + 8 + rng.randrange(48)] = rng.randrange(256)
    return bytes(frame)


def any_message(rng: random.Random):
    """Any type at all, including those only the scheduler may send."""
    return rng.choice([
        lambda: p.Register(random_u32(rng), random_u32(rng), random_text(rng, 80),
                           random_text(rng, 70), random_text(rng, 300), random_text(rng, 70)),
        lambda: p.RequestLock(random_u32(rng), random_u32(rng)),
        lambda: p.MemReport(rng.choice([MAX_DEVICES, 2**31, 2**32 - 1, random_u32(rng)]), 0,
                            rng.randrange(2**64), rng.randrange(2**64)),
        lambda: p.DeviceUuid(random_u32(rng), 0, rng.choice(UUIDS)),
        lambda: p.Control(random_control(rng)),
        lambda: p.LockGranted(random_u32(rng), random_u32(rng), rng.randrange(2**64)),
        lambda: p.DropLock(random_u32(rng)),
        lambda: p.SchedMode(random_u32(rng), random_u32(rng)),
        lambda: p.Limits(rng.randrange(2**64)),
        lambda: p.ControlReply({"ok": True}),
        lambda: p.Error(random_u32(rng), random_text(rng, 20)),
    ])()


def deep_json(rng: random.Random) -> bytes:
    depth = rng.choice([p.MAX_JSON_DEPTH + 1, 500, 20_000])
    payload = b'{"op":"status","x":' + b"[" * depth + b"]" * depth + b"}"
    return p.HEADER.pack(p.MAGIC, p.VERSION, p.MsgType.CONTROL, len(payload), 1) + payload


def mutated(rng: random.Random, frame: bytes) -> bytes:
    data = bytearray(frame)
    how = rng.randrange(7)
    if how == 0:
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif how == 1:
        del data[rng.randrange(len(data)):]
    elif how == 2:
        data += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
    elif how == 3:
        struct.pack_into("<H", data, 6, rng.randrange(65536))  # type
    elif how == 4:
        struct.pack_into("<H", data, 4, rng.choice([0, 1, 3, 65535]))  # version
    elif how == 5:
        struct.pack_into("<I", data, 8, rng.choice([0, 7, 393, DEFAULT_MAX_REQUEST_BYTES + 1,
                                                    p.MAX_PAYLOAD + 1, 2**32 - 1]))
    else:
        data = bytearray(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    return bytes(data)


def last_frame(rng: random.Random, kind: str | None, device: int) -> bytes:
    choice = rng.random()
    if choice < 0.25:
        return p.encode(any_message(rng), rng.randrange(2**32))
    if choice < 0.6:
        return mutated(rng, p.encode(any_message(rng), rng.randrange(2**32)))
    if choice < 0.75 and kind == CLIENT:
        huge = rng.choice([MAX_DEVICES, 2**31, 2**32 - 1])
        return p.encode(rng.choice([p.MemReport(huge, 0, 1, 1), p.RequestLock(huge)]))
    if choice < 0.75:
        return deep_json(rng)
    return odd_client_frame(rng, device) if kind == CLIENT else \
        p.encode(p.Control(random_control(rng)))


def fuzz_connection(rng: random.Random) -> tuple[list[bytes], str | None, int]:
    """(frames, the kind the first frame makes it, its registered device)."""
    opening = rng.random()
    device = rng.randrange(4)
    if opening < 0.55:
        kind = CLIENT
        frames = [p.encode(p.Register(device, random_u32(rng) & p.REG_KNOWN,
                                      random_text(rng, 20)))]
        frames += [odd_client_frame(rng, device) for _ in range(rng.randrange(*ODD_FRAMES))]
    elif opening < 0.85:
        kind = CONTROL
        frames = [p.encode(p.Control(random_control(rng)), rng.randrange(2**32))
                  for _ in range(rng.randrange(*ODD_FRAMES))]
    else:
        kind, frames = None, []
    return frames + [last_frame(rng, kind, device)], kind, device


def expected_error(frame: bytes, kind: str | None, device: int):
    """The ERROR text the scheduler owes the last frame: None for none, ANY when it depends on
    the other connections, "" when the frame was cut short (it waits for the rest, then sees
    the connection close)."""
    decoder = p.FrameDecoder(DEFAULT_MAX_REQUEST_BYTES)
    decoder.feed(frame)
    while True:  # a lengthened frame is followed by more, perhaps frames of their own
        try:
            item = decoder.next()
            if item is None:
                return "" if decoder.inside_frame else None
            message, _ = item
            kind = next_kind(kind, message)
        except p.ProtocolError as exc:
            return str(exc)
        if isinstance(message, (p.Register, p.RequestLock, p.MemReport, p.LockReleased)) and \
                message.device >= MAX_DEVICES:
            return f"device index {message.device} is out of range"
        if isinstance(message, p.Register) and message.unknown_flags() is not None:
            return "have bits this scheduler does not know"
        if isinstance(message, p.Register):
            device = message.device
        if isinstance(message, p.RequestLock) and message.device != device:
            return ANY  # refused if an earlier DEVICE_UUID renumbered the client's GPU


def send_counted(path, frames: list[bytes], kind: str | None, device: int) -> int:
    """Send each frame, read until the scheduler closes, check the close; frames delivered."""
    delivered = 0
    received = p.FrameDecoder()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(path))
        try:
            for frame in frames:
                sock.sendall(frame)
                delivered += 1
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass
        while True:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:  # it closed with our last bytes unread
                data = b""
            if not data:
                break
            received.feed(data)
    errors = []
    while (item := received.next()) is not None:
        if isinstance(item[0], p.Error):
            errors.append(item[0].text)
    expected = expected_error(frames[-1], kind, device)
    got = errors[0] if errors else None
    right = expected is ANY or (got is None if not expected else got and expected in got)
    assert len(errors) <= 1 and right, \
        f"closed with {errors} where the last frame deserves {expected!r}: {frames[-1][:64]!r}"
    assert delivered == len(frames), f"{len(frames) - delivered} frames not sent, {errors}"
    return delivered - (expected == "" or not frames[-1])  # one cut short was not whole


def test_ten_thousand_bad_and_random_frames(scheduler_factory):
    running = scheduler_factory(grace_ms=200)
    delivered = []
    failures = []

    def worker(index: int) -> None:
        rng = random.Random(SEED + index)
        try:
            for _ in range(CONNECTIONS_PER_THREAD):
                delivered.append(send_counted(running.socket, *fuzz_connection(rng)))
        except Exception as exc:  # reported below, with the scheduler's log
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures, f"{failures[:3]}\n{running.log()[-3000:]}"
    assert sum(delivered) >= 10_000

    assert running.process.poll() is None, running.log()[-3000:]
    with running.connect() as control:
        for _ in range(200):
            status = control.request({"op": "status"})
            assert status["ok"] is True
            if not status["status"]["clients"]:
                break
            time.sleep(0.02)
    assert status["status"]["clients"] == []
    json.dumps(status)  # and it is still plain JSON
    log = running.log()
    assert "Traceback" not in log and "internal error" not in log
    assert "closing connection" in log  # the bad frames were seen and refused
    assert "nested more than" in log and "is out of range" in log
