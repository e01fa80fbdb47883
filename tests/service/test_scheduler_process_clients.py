"""Client processes against a scheduler process: contention, kill -9, an unresponsive holder."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gemshare_nvs import protocol as p

LOCK_CLIENT = Path(__file__).with_name("lock_client.py")
DEADLINE = 20.0  # generous: only catches hangs


def start_client(running, name: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(LOCK_CLIENT), str(running.socket), name, *args],
                            stdout=subprocess.PIPE, text=True)


def wait_for_status(running, predicate, what: str) -> dict:
    with running.connect() as control:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            status = control.request({"op": "status"})["status"]
            if predicate(status):
                return status
            time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}; scheduler log:\n{running.log()}")


def registered_waiter(running, name: str):
    conn = running.connect(timeout=DEADLINE)
    conn.send(p.Register(0, 0, name))
    conn.recv()
    conn.send(p.RequestLock(0))
    return conn


def test_client_processes_never_hold_the_lock_together(scheduler_factory):
    running = scheduler_factory()
    clients = [start_client(running, f"worker{i}", "cycles", "15") for i in range(8)]
    holds = []
    for client in clients:
        out, _ = client.communicate(timeout=DEADLINE * 3)
        assert client.returncode == 0
        holds += [tuple(map(float, line.split())) for line in out.splitlines()]
    assert len(holds) == 8 * 15
    holds.sort()
    for (_, end), (next_start, _) in zip(holds, holds[1:]):
        assert end <= next_start, "two processes held the lock at once"
    status = wait_for_status(running, lambda s: not s["clients"], "all clients to leave")
    assert status["devices"] == []  # no lock left behind (and no NVML devices to list here)


def test_kill_9_of_the_holder_grants_the_next_waiter(scheduler_factory):
    running = scheduler_factory(tq=30)
    holder = start_client(running, "doomed", "hold")
    assert holder.stdout.readline().strip() == "granted"
    waiter = registered_waiter(running, "next")
    wait_for_status(running, lambda s: s["devices"][0]["waiters"], "the waiter to queue")
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    message, _ = waiter.recv(timeout=DEADLINE)
    assert message == p.LockGranted(0, p.GRANT_AFTER_WAIT, 30_000)
    assert f"pid {holder.pid}, doomed), held device 0" in running.log()
    waiter.close()


def test_unresponsive_holder_is_revoked_and_the_waiter_granted(scheduler_factory):
    running = scheduler_factory(tq=1, grace_ms=300)
    holder = start_client(running, "stuck", "hold")
    try:
        assert holder.stdout.readline().strip() == "granted"
        waiter = registered_waiter(running, "patient")
        message, _ = waiter.recv(timeout=DEADLINE)
        assert message == p.LockGranted(0, p.GRANT_AFTER_WAIT, 1000)
        status = wait_for_status(running, lambda s: s["revocations"] == 1, "the revocation")
        stuck, = [c for c in status["clients"] if c["name"] == "stuck"]
        assert (stuck["state"], stuck["revocations"], stuck["revoked"]) == ("idle", 1, True)
        log = running.log()
        assert "drop client" in log and "revoke client" in log and "stuck" in log
        assert log.index("drop client") < log.index("revoke client")
        waiter.close()
    finally:
        holder.kill()
        holder.wait()
