"""Fixtures shared by every test directory.

`scheduler_factory(**options)` starts a real `gemshare-scheduler` process on a socket in a fresh
short temporary directory (Unix socket paths are limited to 107 bytes, so pytest's long tmp_path
will not do) and returns once its log says it listens (a connection alone would be taken into the
socket's backlog before the scheduler serves). Options become command-line flags:
`tq=1, grace_ms=500, anti_thrash="off", debug=True` -> `--tq 1 --grace-ms 500 --anti-thrash off
--debug`. Keyword-only extras: `env={...}` adds environment variables, `directory=` uses a
directory you made (the socket is `directory/scheduler.sock`), `wrapper=[...]` puts a command in
front (it must exec the rest), `program=[...]` runs another scheduler than this Python's
`-m gemshare_nvs.daemon` (an installed one), `pass_fds=` keeps descriptors open in the child,
`wait=False` returns at once (call `.wait_until_accepting()` when it should be listening).
Everything started is stopped at teardown. A test scheduler reads `gemshare.toml` and keeps its
settings in `state/` of its own directory, never the machine's, unless `config=` or `state_dir=`
say where.

`inprocess_scheduler(**settings)` runs the Trio server inside the test's own nursery instead
(tests/inprocess.py).

`run_scheduler(*args, env=None)` runs gemshare-scheduler with exactly `args` for a run that is
expected to end by itself (bad options, socket refused) and returns the CompletedProcess.

`hold_signals` is build/hold-signals (launcher/), through which the installed command starts:
`wrapper=[hold_signals]` starts a test scheduler that way.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from inprocess import InProcess

from gemshare_nvs.config.settings import Settings
from gemshare_nvs.service.readiness import wait_until_listening
from gemshare_nvs.service.server import Server
from gemshare_nvs.wire.connection import Connection
from gemshare_nvs.wire.listener import open_listener

REPO = Path(__file__).resolve().parent.parent

# Started in the background by a shell without job control, the run inherits SIGINT ignored,
# and so would every program it starts: tests that interrupt one (gemsharectl top) would hang.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
BUILD = Path(os.environ.get("GEMSHARE_BUILD_DIR") or REPO / "build").resolve()
# Generous: only a scheduler that hangs or dies should take so long, even on a loaded machine.
START_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0
# Variables that would make a test scheduler act as a systemd service by accident.
SERVICE_VARIABLES = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "NOTIFY_SOCKET",
                     "GEMSHARE_SOCKET")


def short_tmp_dir() -> Path:
    """A fresh directory under /tmp that other users may enter (to reach a socket in it)."""
    path = Path(tempfile.mkdtemp(prefix="gs-", dir="/tmp"))
    path.chmod(0o755)
    return path


THIS_SCHEDULER = (sys.executable, "-m", "gemshare_nvs.daemon")


def scheduler_command(socket_path: Path, program=THIS_SCHEDULER, **options) -> list[str]:
    options = {"config": socket_path.parent / "gemshare.toml",
               "state_dir": socket_path.parent / "state", **options}
    command = [*program, "--socket", str(socket_path)]
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            command.append(flag)
        elif value is not False and value is not None:
            command += [flag, str(value)]
    return command


def scheduler_environment(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARIABLES}
    env.update(extra or {})
    return env


class RunningScheduler:
    """A gemshare-scheduler process of a test."""

    def __init__(self, directory: Path, env: dict | None = None, wrapper: list[str] = (),
                 program=THIS_SCHEDULER, pass_fds=(), wait: bool = True, **options):
        self.directory = directory
        self.socket = directory / "scheduler.sock"
        self._log_path = directory / "scheduler.log"
        self._log_file = open(self._log_path, "wb")
        self.process = subprocess.Popen(
            [*wrapper, *scheduler_command(self.socket, program, **options)],
            stdin=subprocess.DEVNULL,
            stdout=self._log_file, stderr=subprocess.STDOUT, cwd=REPO,
            env=scheduler_environment(env), pass_fds=pass_fds)
        if wait:
            self.wait_until_accepting()

    def wait_until_accepting(self) -> None:
        try:
            wait_until_listening(self._log_path, self.socket, self.process, START_TIMEOUT)
        except BaseException:
            self.stop()
            raise

    def log(self) -> str:
        """Everything the scheduler has logged so far."""
        return self._log_path.read_text(errors="replace")

    def connect(self, timeout: float = 5.0) -> Connection:
        return Connection(self.socket, timeout=timeout)

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it hangs; returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log_file.close()
        return self.process.returncode


@pytest.fixture
def short_tmp_dirs():
    """A function that makes short temporary directories; all are removed at teardown."""
    made: list[Path] = []

    def make() -> Path:
        made.append(short_tmp_dir())
        return made[-1]

    yield make
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def scheduler_factory(short_tmp_dirs):
    started: list[RunningScheduler] = []

    def start(*, directory: Path | None = None, **options) -> RunningScheduler:
        running = RunningScheduler(directory or short_tmp_dirs(), **options)
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


@pytest.fixture
def scheduler(scheduler_factory):
    return scheduler_factory()


@pytest.fixture
def run_scheduler():
    def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "gemshare_nvs.daemon", *args],
                              capture_output=True, text=True, cwd=REPO, timeout=30,
                              env=scheduler_environment(env), stdin=subprocess.DEVNULL)
    return run


@pytest.fixture(scope="session")
def hold_signals() -> str:
    """build/hold-signals, made if it is not up to date (make test makes it beforehand)."""
    done = subprocess.run(["make", "-s", "hold-signals", f"BUILD={BUILD}"], cwd=REPO,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    return str(BUILD / "hold-signals")


@pytest.fixture
async def inprocess_scheduler(nursery, short_tmp_dirs):
    started: list[InProcess] = []

    async def start(**options) -> InProcess:
        settings = Settings(socket=short_tmp_dirs() / "scheduler.sock", **options)
        listening = open_listener(settings.socket)
        running = InProcess(Server(settings, listening.sock), listening)
        started.append(running)
        await nursery.start(running.run)
        return running

    yield start
    for running in started:
        await running.stop()
