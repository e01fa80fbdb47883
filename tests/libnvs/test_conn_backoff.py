"""libnvs's pauses between connection attempts (libnvs/wire/conn.c) on their own:
conn_backoff_check.c makes attempts on real sockets with a clock of its own and checks each
pause, so nothing here waits: with nobody there, 100 ms, 200 ms, then 250 ms apart (a scheduler
that starts again is found within a quarter of a second of its socket); with a scheduler that
takes the connection and closes it, doubling to 1 s."""

from __future__ import annotations

import os
import subprocess
import tempfile

from libnvs_programs import REPO


def test_the_pauses_between_connection_attempts(tmp_path):
    binary = tmp_path / "conn_backoff_check"
    libnvs = REPO / "libnvs"
    built = subprocess.run([os.environ.get("CC", "cc"), "-std=gnu11", "-O1", "-Wall", "-Wextra",
                            "-Werror", f"-I{libnvs}", str(libnvs / "wire" / "conn.c"),
                            str(libnvs / "wire" / "wire.c"),
                            str(REPO / "tests" / "libnvs" / "conn_backoff_check.c"),
                            "-o", str(binary)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    with tempfile.TemporaryDirectory(prefix="gs-conn-", dir="/tmp") as directory:  # short path
        done = subprocess.run([binary, directory], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
