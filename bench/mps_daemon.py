"""An NVIDIA MPS control daemon of a benchmark's own: pipe and log directories under a folder
it is given, commands through nvidia-cuda-mps-control, and `quit` when the run is over."""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

CONTROL = "nvidia-cuda-mps-control"


class Daemon:
    """An MPS control daemon of our own, in `root`."""

    def __init__(self, root: Path):
        self.pipe, self.log = root / "pipe", root / "log"
        for path in (self.pipe, self.log):
            path.mkdir(mode=0o755)
            path.chmod(0o755)
        self.env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe),
                    "CUDA_MPS_LOG_DIRECTORY": str(self.log)}

    def start(self) -> None:
        subprocess.run([CONTROL, "-d"], env=self.env, check=True, timeout=30)

    def ask(self, command: str) -> str:
        done = subprocess.run([CONTROL], input=command + "\n", env=self.env, text=True,
                              capture_output=True, timeout=30)
        return done.stdout.strip()

    def clients(self) -> list[int]:
        pids = []
        for server in self.ask("get_server_list").split():
            pids += [int(pid) for pid in self.ask(f"get_client_list {server}").split()
                     if pid.isdigit()]
        return pids

    def quit(self) -> None:
        try:
            self.ask("quit")
        except (OSError, subprocess.SubprocessError):
            pass


@contextmanager
def running_daemon(root: Path):
    """A started daemon in `root` (made here); told to quit however the block ends."""
    root.mkdir(parents=True, exist_ok=True)
    daemon = Daemon(root)
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.quit()
