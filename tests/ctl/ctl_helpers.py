"""Helpers for the gemsharectl tests: stand-in clients, status polling, running as nobody."""

from __future__ import annotations

import io
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

import pytest

from gemshare_ctl import app as ctl_app
from gemshare_ctl import client as ctl_client
from gemshare_nvs import protocol
from gemshare_nvs.wire.connection import Connection

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
RUN_TIMEOUT = 30.0
STATUS_TIMEOUT = 10.0


def wait_for_status(socket: Path, predicate, timeout: float = STATUS_TIMEOUT) -> dict:
    """Poll the scheduler's status until predicate(status) holds; fail with the last one."""
    deadline = time.monotonic() + timeout
    while True:
        status = ctl_client.read_status(socket, timeout=5.0)
        if predicate(status):
            return status
        if time.monotonic() > deadline:
            pytest.fail(f"the scheduler's status never reached the expected state: {status}")
        time.sleep(0.02)


class StandInClient:
    """A registered client that speaks the protocol itself, as libnvs.so does in a CUDA program."""

    def __init__(self, socket: Path, name: str, device: int = 0, pod: str = "",
                 namespace: str = ""):
        self.device = device
        self.connection = Connection(socket, timeout=10.0)
        self.connection.send(protocol.Register(device=device, process_name=name, pod_name=pod,
                                               pod_namespace=namespace))
        reply = self.next_message()
        assert isinstance(reply, protocol.Registered), reply
        self.id = reply.client_id

    def next_message(self):
        message, _ = self.connection.recv()
        return message

    def next_of(self, kind):
        """The next message of one kind; others (e.g. SCHED_MODE) are skipped. Bounded by recv."""
        for _ in range(100):
            message = self.next_message()
            if isinstance(message, kind):
                return message
        raise AssertionError(f"no {kind.__name__} among 100 messages")

    def request_lock(self) -> None:
        self.connection.send(protocol.RequestLock(device=self.device))

    def take_lock(self) -> None:
        self.request_lock()
        self.next_of(protocol.LockGranted)

    def report_memory(self, allocated: int, total: int = 0) -> None:
        self.connection.send(protocol.MemReport(device=self.device, allocated_bytes=allocated,
                                                device_total_bytes=total))

    def close(self) -> None:
        self.connection.close()


def _drop_to_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _ctl_main_status(args: list[str], out_fd: int) -> int:
    """Run gemsharectl's entry point in this process with its output going to out_fd."""
    sys.stdout = sys.stderr = io.TextIOWrapper(os.fdopen(out_fd, "wb", closefd=False),
                                               write_through=True)
    sys.argv = ["gemsharectl", *args]
    try:
        ctl_app.main()
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 1
    return 0


def run_as_nobody(args: list[str]) -> tuple[int, str]:
    """(exit status, output) of gemsharectl run as nobody in a forked child."""
    with tempfile.TemporaryFile() as out:
        pid = os.fork()
        if pid == 0:  # the child never returns into pytest
            status = 99
            try:
                _drop_to_nobody()
                status = _ctl_main_status(args, out.fileno())
            except BaseException:
                traceback.print_exc(file=sys.stderr)
            finally:
                try:
                    sys.stderr.flush()
                finally:
                    os._exit(status)
        deadline = time.monotonic() + RUN_TIMEOUT
        while not (done := os.waitpid(pid, os.WNOHANG))[0]:
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise AssertionError(f"gemsharectl {' '.join(args)} hung in a forked child")
            time.sleep(0.01)
        out.seek(0)
        return os.waitstatus_to_exitcode(done[1]), out.read().decode(errors="replace")


# pip's words when PyPI cannot be reached; then the test cannot run here, which is no failure.
OFFLINE_SIGNS = ("NewConnectionError", "Temporary failure in name resolution",
                 "No matching distribution found", "Network is unreachable")


def skip_if_pypi_unreachable(result, what: str) -> None:
    """Skip the test if `what` (a finished make that runs pip) failed for want of PyPI."""
    if result.returncode != 0 and any(sign in result.stderr for sign in OFFLINE_SIGNS):
        pytest.skip(f"{what} needs PyPI, which cannot be reached here")


def make_variables() -> list[str]:
    """BUILD and VENV for a make run from a test: the build dir and virtualenv in use."""
    build = os.environ.get("GEMSHARE_BUILD_DIR", str(REPO / "build"))
    variables = [f"BUILD={build}"]
    if (Path(sys.prefix) / ".installed").exists():  # the virtualenv `make venv` made and runs us
        variables.append(f"VENV={sys.prefix}")
    return variables


GIB = 1 << 30


def holder_and_waiter(scheduler, stand_in_client, idle_device: int | None = None):
    """A holder with 3 GiB and a waiter from a pod (and an idle client on `idle_device`, if
    given), returned once the status shows them so: (holder, waiter, idle or None)."""
    holder = stand_in_client(scheduler.socket, "trainer-a")
    holder.report_memory(3 * GIB, 80 * GIB)
    holder.take_lock()
    waiter = stand_in_client(scheduler.socket, "trainer-b", pod="job-7", namespace="ml")
    waiter.request_lock()
    idle = None if idle_device is None else \
        stand_in_client(scheduler.socket, "idle-c", device=idle_device)
    states = {holder.id: "holding", waiter.id: "waiting", **({idle.id: "idle"} if idle else {})}
    wait_for_status(scheduler.socket, lambda s: {c["id"]: c["state"] for c in s["clients"]} ==
                    states and any(c["allocated_bytes"] == 3 * GIB for c in s["clients"]))
    return holder, waiter, idle
