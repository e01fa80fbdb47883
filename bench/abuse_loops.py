"""What an unprivileged local user can do to a scheduler cheaply, one loop per run, as
bench/abuse.py starts it: `python abuse_loops.py UID LOOP ARGS...`. Started as root it becomes
UID first (no supplementary groups, the uid as its gid), so the scheduler sees that user; UID 0
stays root.

Loops (SECONDS: how long it goes on, or until SIGTERM; it prints one JSON object when done):
  connect-close SOCKET SECONDS       connect and hang up at once; again (a connect that finds
                                     the queue full fails, and is tried again at once)
  half-frames SOCKET SECONDS         connect, send half a frame header, hang up; again
  register SOCKET SECONDS            connect, REGISTER, hang up; again
  request-release SOCKET SECONDS     one client asking for the lock and giving it back
  status SOCKET SECONDS              connect, ask for status, hang up; again
  hold-control SOCKET COUNT SECONDS  COUNT control connections, a status each, then held open;
                                     prints how many were answered as soon as it knows
  slow-http HOST PORT COUNT SECONDS  COUNT connections sending one byte of a request a second,
                                     each opened again when the server closes it
"""

from __future__ import annotations

import encodings.idna  # noqa: F401  (loaded lazily by socket's host names: not after setuid)
import json
import os
import signal
import socket
import sys
import time

from gemshare_nvs import protocol as p

SLOW_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"  # never ends: no blank line


class Stopped(Exception):
    """SIGTERM in a loop that is not repeated: it just ends."""


# SIGTERM: a repeated loop ends after its round and says what it did. (Raising from the handler
# there could come inside a socket's finalizer, where Python drops the exception.)
stopping = False
repeating = False


def become(uid: int) -> None:
    if os.geteuid() == 0 and uid != 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)


def connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    try:
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


def read_frame(sock: socket.socket, decoder: p.FrameDecoder):
    while (item := decoder.next()) is None:
        data = sock.recv(65536)
        if not data:
            return None
        decoder.feed(data)
    return item[0]


def repeat(seconds: float, once) -> dict:
    """`once()` as often as it goes in `seconds`; how often it went and how often it failed."""
    global repeating
    repeating = True
    done = failed = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end and not stopping:
        try:
            once()
            done += 1
        except OSError:
            failed += 1
    return {"done": done, "failed": failed}


def connect_close(path: str, seconds: str) -> dict:
    def once():
        connect(path).close()
    return repeat(float(seconds), once)


def half_frames(path: str, seconds: str) -> dict:
    def once():
        with connect(path) as sock:
            sock.sendall(b"GSHR")
    return repeat(float(seconds), once)


def register(path: str, seconds: str) -> dict:
    def once():
        with connect(path) as sock:
            sock.sendall(p.encode(p.Register(0, 0, "abuse")))
            read_frame(sock, p.FrameDecoder())
    return repeat(float(seconds), once)


def request_release(path: str, seconds: str) -> dict:
    with connect(path) as sock:
        decoder = p.FrameDecoder()
        sock.sendall(p.encode(p.Register(0, 0, "abuse")))
        read_frame(sock, decoder)

        def once():
            sock.sendall(p.encode(p.RequestLock(0)))
            while not isinstance(read_frame(sock, decoder), (p.LockGranted, type(None))):
                pass
            sock.sendall(p.encode(p.LockReleased(0, p.ReleaseReason.IDLE)))
        return repeat(float(seconds), once)


def status(path: str, seconds: str) -> dict:
    def once():
        with connect(path) as sock:
            sock.sendall(p.encode(p.Control({"op": "status"})))
            read_frame(sock, p.FrameDecoder())
    return repeat(float(seconds), once)


def hold_control(path: str, count: str, seconds: str) -> dict:
    held, answered = [], 0
    for _ in range(int(count)):
        sock = connect(path)
        held.append(sock)
        sock.sendall(p.encode(p.Control({"op": "status"})))
        if isinstance(read_frame(sock, p.FrameDecoder()), p.ControlReply):
            answered += 1
    print(json.dumps({"answered": answered}), flush=True)
    time.sleep(float(seconds))
    return {"answered": answered}


def slow_http(host: str, port: str, count: str, seconds: str) -> dict:
    def opened() -> socket.socket:
        return socket.create_connection((host, int(port)), timeout=10)
    conns = [opened() for _ in range(int(count))]
    made, sent = len(conns), 0
    end = time.monotonic() + float(seconds)
    while time.monotonic() < end:
        for index, conn in enumerate(conns):
            try:
                conn.sendall(SLOW_REQUEST[sent % len(SLOW_REQUEST):][:1])
            except OSError:  # closed by the server: in again
                conn.close()
                conns[index] = opened()
                made += 1
        sent += 1
        time.sleep(1.0)
    for conn in conns:
        conn.close()
    return {"connections": made}


LOOPS = {"connect-close": connect_close, "half-frames": half_frames, "register": register, "request-release": request_release,
         "status": status, "hold-control": hold_control, "slow-http": slow_http}


def stop(signum, frame) -> None:
    global stopping
    stopping = True
    if not repeating:
        raise Stopped


def main() -> None:
    uid, loop, *args = sys.argv[1:]
    signal.signal(signal.SIGTERM, stop)
    become(int(uid))
    try:
        print(json.dumps(LOOPS[loop](*args)), flush=True)
    except Stopped:
        pass


if __name__ == "__main__":
    main()
