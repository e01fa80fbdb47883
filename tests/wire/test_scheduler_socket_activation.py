"""Socket activation by systemd's own tool, where it is installed: systemd-socket-activate
listens as gemshare-scheduler.socket does and starts the scheduler on the first connection."""

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gemshare_nvs.wire.connection import Connection

REPO = Path(__file__).resolve().parents[2]
ACTIVATE = shutil.which("systemd-socket-activate")
START_TIMEOUT = 30.0


@pytest.mark.skipif(ACTIVATE is None, reason="systemd-socket-activate is not installed")
def test_the_first_connection_starts_the_scheduler_on_systemd_s_socket(short_tmp_dirs):
    directory = short_tmp_dirs()
    path, log_path = directory / "scheduler.sock", directory / "scheduler.log"
    with open(log_path, "wb") as log:
        activator = subprocess.Popen(
            [ACTIVATE, "--listen", str(path), sys.executable, "-m", "gemshare_nvs.daemon",
             "--socket", str(directory / "unused.sock")],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        # This connection waits in systemd's listening socket until the scheduler, started
        # for it, accepts it.
        with Connection(path, timeout=START_TIMEOUT) as control:
            status = control.request({"op": "status"})
        assert status["ok"] is True and status["status"]["pid"] == activator.pid
        assert f"listening on {path} (socket from systemd)" in log_path.read_text()
        assert not (directory / "unused.sock").exists()  # --socket yields to the inherited one
    finally:
        activator.send_signal(signal.SIGTERM)
        assert activator.wait(15) == 0, log_path.read_text()
