"""The user that bench/abuse.py measures against, and the loops it runs as that user
(bench/abuse_loops.py): uid 65534 when the bench runs as root, else the user running it. Also
root's control requests, as the other side of each measurement."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from gemshare_nvs.wire.connection import Connection

NOBODY = 65534
ABUSER = NOBODY if os.geteuid() == 0 else os.geteuid()
LOOPS = Path(__file__).with_name("abuse_loops.py")
ANSWER_WAIT = 10.0  # how long an answer is waited for before it counts as none


def start_loop(name: str, *args, uid: int = ABUSER) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(LOOPS), str(uid), name, *map(str, args)],
                            stdout=subprocess.PIPE, text=True)


def loop_result(process: subprocess.Popen) -> dict:
    """The last line a loop printed: what it did."""
    out, _ = process.communicate(timeout=120)
    lines = out.strip().splitlines()
    return json.loads(lines[-1]) if lines else {}


@contextlib.contextmanager
def looping(name: str, *args, copies: int = 1):
    """`copies` of a loop running for as long as the block does (stopped at the end); the
    block gets their processes."""
    processes = [start_loop(name, *args) for _ in range(copies)]
    try:
        yield processes
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait()


def request(socket: Path, body: dict, timeout: float = ANSWER_WAIT) -> dict:
    """A control request as root; {"ok": False, "error": ...} when it goes unanswered."""
    try:
        with Connection(socket, timeout=timeout) as conn:
            return conn.request(body)
    except Exception as exc:  # refused, closed, timed out: all mean no answer
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
