"""A client that lies to the scheduler, as its own process: it speaks the protocol itself (no
libnvs, no CUDA), so it holds no GPU memory whatever it says.

    python lying_client.py SOCKET report BYTES
        one MEM_REPORT of BYTES for device 0, never asking for the lock; prints "reported",
        then sleeps until killed
    python lying_client.py SOCKET context BYTES MANAGED
        the same from a process with a context on the fake GPU (the driver, libcuda.so.1, on
        LD_LIBRARY_PATH) and MANAGED bytes of managed memory there, so that NVML lists it
    python lying_client.py SOCKET bounce BYTES IDLE_S HOLD_S
        reports BYTES, then again and again: asks for the lock, holds it HOLD_S, releases it as
        idle claiming IDLE_S of idleness, and asks again at once; answers drops and EVICTs as
        libnvs would (at once, claiming every byte moved); prints the grants it had at SIGTERM
"""

from __future__ import annotations

import ctypes
import signal
import sys
import time

from gemshare_nvs import protocol as p
from gemshare_nvs.wire.connection import Connection


def registered(path: str, allocated: int) -> Connection:
    conn = Connection(path, timeout=60)
    conn.send(p.Register(0, 0, "liar"))
    while not isinstance(conn.recv()[0], p.Registered):  # its LIMITS come first
        pass
    conn.send(p.MemReport(0, 0, allocated, 0))
    return conn


def answer(conn: Connection, message, allocated: int) -> bool:
    """Answer what asks for an answer; whether it was a DROP_LOCK (the lock is gone)."""
    if isinstance(message, p.Evict):
        conn.send(p.Moved(0, p.MOVED_TO_HOST | p.MOVED_DONE, message.bytes, 1))
    if isinstance(message, p.DropLock):
        conn.send(p.LockReleased(0, p.ReleaseReason.DROPPED))
        return True
    return isinstance(message, p.LockRevoked)


def bounce(conn: Connection, allocated: int, idle_s: float, hold_s: float) -> None:
    grants = 0

    def stop(*_):
        print(grants, flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    while True:
        conn.send(p.RequestLock(0))
        while True:
            message, _ = conn.recv(timeout=600)
            if isinstance(message, p.LockGranted):
                break
            answer(conn, message, allocated)
        grants += 1
        # Its memory "comes back" as any program's would, in no time.
        conn.send(p.Moved(0, p.MOVED_DONE, allocated, 1))
        end = time.monotonic() + hold_s
        dropped = False
        while not dropped and (left := end - time.monotonic()) > 0:
            try:
                message, _ = conn.recv(timeout=left)
            except TimeoutError:
                break
            dropped = answer(conn, message, allocated)
        if not dropped:
            conn.send(p.LockReleased(0, p.ReleaseReason.IDLE, int(idle_s * 1e6)))


def context_with_managed(size: int) -> None:
    """A context on device 0 of the fake driver and `size` bytes of managed memory there."""
    cuda = ctypes.CDLL("libcuda.so.1")
    context, pointer = ctypes.c_void_p(), ctypes.c_uint64()
    for name, call in (("cuInit", lambda: cuda.cuInit(0)),
                       ("cuCtxCreate_v2", lambda: cuda.cuCtxCreate_v2(ctypes.byref(context), 0, 0)),
                       ("cuMemAllocManaged", lambda: cuda.cuMemAllocManaged(
                           ctypes.byref(pointer), ctypes.c_size_t(size), 1))):
        if call() != 0:
            raise SystemExit(f"{name} failed")


def main(path: str, mode: str, allocated: str, *rest: str) -> None:
    if mode == "context":
        context_with_managed(int(rest[0]))
    conn = registered(path, int(allocated))
    if mode in ("report", "context"):
        print("reported", flush=True)
        time.sleep(3600)
    else:
        bounce(conn, int(allocated), float(rest[0]), float(rest[1]))


if __name__ == "__main__":
    main(*sys.argv[1:])
