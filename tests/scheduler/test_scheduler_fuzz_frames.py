"""At least 10,000 random and mutated frames over many connections; the scheduler survives.

A seeded generator makes the run repeatable: valid frames of every type with random fields,
the same frames with bytes flipped, cut short, lengthened, or with a wrong type, version or
length, and plain random bytes. Several threads send at once. Afterwards the scheduler process is
still running, answers status, has forgotten every fuzzing client and logged no traceback.
"""

import json
import random
import socket
import struct
import threading
import time

from gemshare_nvs import protocol as p

SEED = 20240611
THREADS = 4
CONNECTIONS_PER_THREAD = 250
FRAMES_PER_CONNECTION = 10
U32 = (0, 1, 2, 7, 1023, 1024, 2**31, 2**32 - 1)


def random_text(rng: random.Random, limit: int) -> str:
    alphabet = "abc\0\n\t\u00e9\u4e2d\U0001f600"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(limit)))


def random_control(rng: random.Random) -> dict:
    body = {"op": rng.choice(["status", "set", "set", "nope", 5, None])}
    if rng.random() < 0.6:
        body["tq"] = rng.choice([1, 30, 86400, 0, -1, 86401, 2.5, True, "30", None, [1]])
    if rng.random() < 0.6:
        body["anti_thrash"] = rng.choice(["on", "off", "auto", "ON", "", 1, None])
    if rng.random() < 0.1:
        body[random_text(rng, 5)] = random_text(rng, 5)
    return body


def random_u32(rng: random.Random) -> int:
    return rng.choice(U32) if rng.random() < 0.05 else rng.randrange(4)


def client_message(rng: random.Random):
    return rng.choice([
        lambda: p.RequestLock(random_u32(rng), random_u32(rng)),
        lambda: p.LockReleased(random_u32(rng), rng.randrange(6)),
        lambda: p.MemReport(random_u32(rng), 0, rng.randrange(2**64), rng.randrange(2**64)),
    ])()


def any_message(rng: random.Random):
    """Any type at all, including those only the scheduler may send."""
    return rng.choice([
        lambda: p.Register(random_u32(rng), random_u32(rng), random_text(rng, 80),
                           random_text(rng, 70), random_text(rng, 300)),
        lambda: client_message(rng),
        lambda: p.Control(random_control(rng)),
        lambda: p.LockGranted(random_u32(rng), random_u32(rng), rng.randrange(2**64)),
        lambda: p.DropLock(random_u32(rng)),
        lambda: p.SchedMode(random_u32(rng), random_u32(rng)),
        lambda: p.ControlReply({"ok": True}),
        lambda: p.Error(random_u32(rng), random_text(rng, 20)),
    ])()


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
        struct.pack_into("<H", data, 4, rng.choice([0, 2, 65535]))  # version
    elif how == 5:
        struct.pack_into("<I", data, 8, rng.choice([0, 7, 393, p.MAX_PAYLOAD + 1, 2**32 - 1]))
    else:
        data = bytearray(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    return bytes(data)


def fuzz_connection(rng: random.Random) -> list[bytes]:
    """Mostly well-formed conversations with random fields, so most frames are processed; half
    end in one mutated frame, and some are nonsense from the start."""
    kind = rng.random()
    if kind < 0.5:
        frames = [p.encode(p.Register(rng.randrange(3), 0, random_text(rng, 20)))]
        make = client_message
    elif kind < 0.8:
        frames = [p.encode(p.Control({"op": "status"}))]
        make = lambda rng: p.Control(random_control(rng))  # noqa: E731
    else:
        frames, make = [], any_message
    while len(frames) < FRAMES_PER_CONNECTION - 1:
        frames.append(p.encode(make(rng), rng.randrange(2**32)))
    last = p.encode(any_message(rng), rng.randrange(2**32))
    frames.append(mutated(rng, last) if rng.random() < 0.5 else last)
    return frames


def send_and_drain(path, frames: list[bytes]) -> None:
    """Send everything, then read until the scheduler closes (it may close early)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(path))
        try:
            sock.sendall(b"".join(frames))
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
        except (BrokenPipeError, ConnectionResetError):
            pass


def test_ten_thousand_bad_and_random_frames(scheduler_factory):
    running = scheduler_factory(grace_ms=200)
    sent = []
    failures = []

    def worker(index: int) -> None:
        rng = random.Random(SEED + index)
        try:
            for _ in range(CONNECTIONS_PER_THREAD):
                frames = fuzz_connection(rng)
                send_and_drain(running.socket, frames)
                sent.append(len(frames))
        except Exception as exc:  # reported below, with the scheduler's log
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures, f"{failures[:3]}\n{running.log()[-3000:]}"
    assert sum(sent) >= 10_000

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
    assert "Traceback" not in log
    assert "closing connection" in log  # the bad frames were seen and refused
