"""A stand-in scheduler client as its own process, for the subprocess tests.

    python lock_client.py SOCKET NAME cycles N   take the lock N times, hold it briefly, release;
                                                 prints one "start end" line per hold
    python lock_client.py SOCKET NAME hold       take the lock, print "granted", then sleep
                                                 without ever reading again (unresponsive)
"""

import sys
import time

from gemshare_nvs import protocol as p
from gemshare_nvs.wire.connection import Connection

HOLD_SECONDS = 0.005


def wait_for_grant(conn: Connection, device: int = 0) -> p.LockGranted:
    while True:
        message, _ = conn.recv(timeout=60)
        if isinstance(message, p.LockGranted) and message.device == device:
            return message


def cycles(conn: Connection, count: int) -> None:
    for _ in range(count):
        conn.send(p.RequestLock(0))
        wait_for_grant(conn)
        start = time.monotonic()
        time.sleep(HOLD_SECONDS)
        end = time.monotonic()
        conn.send(p.LockReleased(0, p.ReleaseReason.IDLE))
        print(f"{start!r} {end!r}", flush=True)


def hold(conn: Connection) -> None:
    conn.send(p.RequestLock(0))
    wait_for_grant(conn)
    print("granted", flush=True)
    time.sleep(3600)


def main(path: str, name: str, mode: str, *rest: str) -> None:
    conn = Connection(path, timeout=60)
    conn.send(p.Register(0, 0, name))
    registered, _ = conn.recv()
    assert isinstance(registered, p.Registered), registered
    if mode == "cycles":
        cycles(conn, int(rest[0]))
    else:
        hold(conn)


if __name__ == "__main__":
    main(*sys.argv[1:])
