"""The scheduler with many clients: grants per second and resident memory.

One process (this one) opens N client connections to a real gemshare-scheduler and registers them
all. Then every client asks for the lock of device 0 (mode `on`); whichever is granted releases
at once (RELEASE_IDLE) and asks again, so it goes to the back of the queue. With N clients waiting
the scheduler always has a queue to grant from, and each grant is one round trip: LOCK_RELEASED
(+ REQUEST_LOCK) in, LOCK_GRANTED out. The scheduler's memory is its VmRSS from /proc.
"""

from __future__ import annotations

import math
import os
import resource
import selectors
import socket
import time
from pathlib import Path

from scheduler_process import SchedulerProcess

from gemshare_nvs import protocol as p
from gemshare_nvs.wire.connection import Connection

RELEASE_AND_REQUEST = (p.encode(p.LockReleased(0, p.ReleaseReason.IDLE))
                       + p.encode(p.RequestLock(0)))
REQUEST = p.encode(p.RequestLock(0))
TIMEOUT_S = 60.0  # only catches a hang


def raise_open_files(needed: int) -> None:
    """Lets this process and the scheduler it starts (which inherits it) open `needed` files."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise RuntimeError(f"the scale benchmark needs {needed} open files but the hard limit "
                           f"(ulimit -Hn) is {hard}; raise it or run with fewer clients")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def resident_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


class Clients:
    """N registered client connections, served by one selector loop."""

    def __init__(self, path: Path, count: int):
        self.path = path
        self.selector = selectors.DefaultSelector()
        self.socks: list[socket.socket] = []
        self.decoders: dict[int, p.FrameDecoder] = {}
        self.grants = [0] * count
        register = p.encode(p.Register(0, 0, "bench-scale"))
        for index in range(count):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(str(path))
            sock.sendall(register)
            self.socks.append(sock)
            self.decoders[index] = p.FrameDecoder()
            self.selector.register(sock, selectors.EVENT_READ, index)
        registered = [0]
        self._serve(lambda index, message: isinstance(message, p.Registered),
                    lambda: registered[0] >= count, registered)

    def _serve(self, counts, done, counter: list[int], deadline: float | None = None) -> None:
        """Reads frames until done(); counts[0] += 1 for each message counts() accepts."""
        limit = time.monotonic() + TIMEOUT_S
        while not done():
            now = time.monotonic()
            if now > limit:
                raise RuntimeError(f"the scheduler stopped answering ({counter[0]} answers)")
            if deadline is not None and now >= deadline:
                return
            for key, _ in self.selector.select(timeout=1.0):
                index = key.data
                data = key.fileobj.recv(65536)
                if not data:
                    raise RuntimeError(f"the scheduler closed client connection {index}")
                decoder = self.decoders[index]
                decoder.feed(data)
                while (item := decoder.next()) is not None:
                    message = item[0]
                    if isinstance(message, p.Error):
                        raise RuntimeError(f"the scheduler refused client {index}: "
                                           f"{message.text}")
                    if counts(index, message):
                        counter[0] += 1

    def cycle(self, seconds: float) -> tuple[int, float]:
        """Every client requests; each grant is answered by release + request. (grants, s)."""
        for sock in self.socks:
            sock.sendall(REQUEST)
        self._wait_until_all_queued()

        def granted(index: int, message) -> bool:
            if not isinstance(message, p.LockGranted):
                return False
            self.grants[index] += 1
            self.socks[index].sendall(RELEASE_AND_REQUEST)
            return True

        counter = [0]
        start = time.perf_counter()
        self._serve(granted, lambda: False, counter, deadline=time.monotonic() + seconds)
        return counter[0], time.perf_counter() - start

    def _wait_until_all_queued(self) -> None:
        """The scheduler reads connections in no fixed order; serving grants before every first
        request has arrived would let a fast re-request pass a client still on its first."""
        deadline = time.monotonic() + TIMEOUT_S
        with Connection(self.path) as control:
            while True:
                device, = control.request({"op": "status"})["status"]["devices"]
                if len(device["holders"]) + len(device["waiters"]) == len(self.socks):
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError("the scheduler never queued every client's request")
                time.sleep(0.01)

    def close(self) -> None:
        self.selector.close()
        for sock in self.socks:
            sock.close()


def measure(clients: int, seconds: float, directory: Path) -> dict:
    directory.mkdir(parents=True)
    raise_open_files(2 * clients + 256)  # our ends, the scheduler's ends, and slack
    scheduler = SchedulerProcess(directory, anti_thrash="on", max_clients=clients)
    connections = None
    try:
        pid = scheduler.process.pid
        idle_rss, _ = resident_kib(pid)
        start = time.perf_counter()
        connections = Clients(scheduler.socket, clients)
        register_s = time.perf_counter() - start
        connected_rss, _ = resident_kib(pid)
        cpu_before = cpu_seconds(pid)
        grants, elapsed = connections.cycle(seconds)
        scheduler_cpu = cpu_seconds(pid) - cpu_before
        scheduler.check_running()
        cycling_rss, peak = resident_kib(pid)
        per_client = connections.grants
    finally:
        if connections is not None:
            connections.close()
        scheduler.stop()
    return {"clients": clients, "register_s": register_s, "grants": grants,
            "grants_per_s": grants / elapsed, "seconds": elapsed,
            "scheduler_cpu_share": scheduler_cpu / elapsed,
            "scheduler_cpu_us_per_grant": scheduler_cpu / grants * 1e6 if grants else math.nan,
            "grants_per_client_min": min(per_client), "grants_per_client_max": max(per_client),
            "rss_idle_mib": idle_rss / 1024, "rss_connected_mib": connected_rss / 1024,
            "rss_cycling_mib": cycling_rss / 1024, "rss_peak_mib": peak / 1024}
