"""A gemshare-scheduler subprocess for a benchmark run."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from gemshare_nvs.service.readiness import NotListening, wait_until_listening

# No config file and no state directory: /etc/gemshare/gemshare.toml and the settings kept in
# /var/lib/gemshare would give the bench's scheduler other settings and rules than it asked for.
ISOLATED = ("--config", "", "--state-dir", "")
START_TIMEOUT_S = 60  # only a scheduler that hangs or dies takes so long to say it listens


def scheduler_command(socket_path: Path, args=(), **options) -> list[str]:
    """The command line of a bench's scheduler (SchedulerProcess says what the arguments do)."""
    command = [sys.executable, "-m", "gemshare_nvs.daemon", "--socket", str(socket_path),
               *ISOLATED]
    for name, value in options.items():
        command += ["--" + name.replace("_", "-"), str(value)]
    return command + list(args)


class SchedulerProcess:
    def __init__(self, directory: Path, env: dict | None = None, args=(),
                 start_timeout: float = 15.0, **options):
        """`options` become flags (capacity_mib=1024 -> --capacity-mib 1024) and `args` follow
        them as given, so that a flag there wins; `env` replaces the inherited environment.
        There is no config file or state directory unless `options` or `args` name one. It
        must listen within `start_timeout` seconds."""
        self.socket = directory / "scheduler.sock"
        self.log_path = directory / "scheduler.log"
        command = scheduler_command(self.socket, args, **options)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, env=env)
        try:
            wait_until_listening(self.log_path, self.socket, self.process, start_timeout)
        except NotListening as failure:
            self.stop()
            raise RuntimeError(f"scheduler did not start: {failure}") from None

    def check_running(self) -> None:
        """Raises, with the scheduler's log, if it has exited: a run without it measured nothing."""
        if self.process.poll() is not None:
            raise RuntimeError(f"the scheduler exited ({self.process.returncode}) during the run:\n"
                               f"{self.log_path.read_text()[-4000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
