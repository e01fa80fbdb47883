"""The NVIDIA MPS control daemon the scheduler runs with --mps: started with pipe and log
directories of its own beside the scheduler's socket (or adopted, by its pipe directory),
watched, started again when it dies, and told to quit when the scheduler stops.

Everything goes through `nvidia-cuda-mps-control` from PATH: `-d` starts the daemon, and the
same program with no argument sends it one command on stdin (`get_server_list` answers whether
it is alive; `quit` ends it). Each call runs as a child process under a deadline, so a daemon
that hangs can hold up neither the event loop nor the scheduler's exit.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import trio

log = logging.getLogger("gemshare.scheduler")

CONTROL_PROGRAM = "nvidia-cuda-mps-control"
PROBE_INTERVAL_S = 5.0  # how often the daemon is asked whether it still answers
COMMAND_TIMEOUT_S = 10.0
READY_TIMEOUT_S = 10.0  # from `-d` to its first answer
# Waits before each further start of a daemon that keeps dying; the last repeats.
RESTART_BACKOFF_S = (0.0, 1.0, 5.0, 30.0)


def directories_beside(socket: Path) -> tuple[Path, Path]:
    """The pipe and log directories of the scheduler's own daemon: `mps/` beside the socket
    (/var/run/gemshare/mps/ for the system socket)."""
    root = socket.parent / "mps"
    return root / "pipe", root / "log"


class MpsControl:
    def __init__(self, pipe: Path, log_dir: Path | None, *, adopted: bool,
                 program: str = CONTROL_PROGRAM):
        self.pipe = pipe
        self.log_dir = log_dir  # None for an adopted daemon: its owner chose
        self.adopted = adopted
        self.program = program
        self.running = False
        self.started_by_us = False
        self.restarts = 0
        self.problem = ""  # why it is not running, for status

    @classmethod
    def for_scheduler(cls, socket: Path, adopt: str | None) -> MpsControl:
        if adopt is not None:
            return cls(Path(adopt), None, adopted=True)
        pipe, log_dir = directories_beside(socket)
        return cls(pipe, log_dir, adopted=False)

    def environment(self) -> dict[str, str]:
        env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe)}
        if self.log_dir is not None:
            env["CUDA_MPS_LOG_DIRECTORY"] = str(self.log_dir)
        return env

    async def ask(self, command: str) -> str | None:
        """The daemon's answer to one command; None when it does not answer."""
        executable = shutil.which(self.program)
        if executable is None:
            self.problem = f"{self.program} is not on PATH"
            return None
        with trio.move_on_after(COMMAND_TIMEOUT_S):
            done = await trio.run_process([executable], stdin=(command + "\n").encode(),
                                          capture_stdout=True, capture_stderr=True, check=False,
                                          env=self.environment())
            if done.returncode == 0:
                return done.stdout.decode(errors="replace").strip()
            said = (done.stderr or done.stdout).decode(errors="replace").strip()
            self.problem = f"{self.program} exited with status {done.returncode}" + \
                (f": {said.splitlines()[-1][:200]}" if said else "")
            return None
        self.problem = f"{self.program} did not answer {command!r} within {COMMAND_TIMEOUT_S:g} s"
        return None

    async def answers(self) -> bool:
        return await self.ask("get_server_list") is not None

    async def start(self) -> bool:
        """Bring a daemon up (or find the adopted one); whether it answers."""
        if self.adopted:
            return await self.answers()
        for path in (self.pipe.parent, self.pipe, self.log_dir):
            path.mkdir(mode=0o755, parents=True, exist_ok=True)
            path.chmod(0o755)  # clients of every user reach the pipes through it
        if await self.answers():  # left running by an earlier scheduler: ours to stop
            log.info("MPS: the control daemon at %s already answers: using it", self.pipe)
            self.started_by_us = True
            return True
        executable = shutil.which(self.program)
        if executable is None:
            self.problem = f"{self.program} is not on PATH"
            return False
        # The daemon forks away from the process we start and may keep what it inherited open:
        # its output goes to a file, never a pipe we would wait on.
        with tempfile.TemporaryFile() as said:
            with trio.move_on_after(COMMAND_TIMEOUT_S) as deadline:
                done = await trio.run_process([executable, "-d"], env=self.environment(),
                                              stdin=b"", stdout=subprocess.DEVNULL, stderr=said,
                                              check=False)
            if deadline.cancelled_caught:
                self.problem = f"{self.program} -d did not return within {COMMAND_TIMEOUT_S:g} s"
                return False
            if done.returncode != 0:
                said.seek(0)
                text = said.read(4096).decode(errors="replace").strip()
                self.problem = f"{self.program} -d exited with status {done.returncode}" + \
                    (f": {text.splitlines()[-1][:200]}" if text else "")
                return False
        with trio.move_on_after(READY_TIMEOUT_S):
            while not await self.answers():
                await trio.sleep(0.1)
            self.started_by_us = True
            log.info("MPS: started %s -d (pipe directory %s, log directory %s)", self.program,
                     self.pipe, self.log_dir)
            return True
        self.problem = f"the control daemon did not answer within {READY_TIMEOUT_S:g} s of -d"
        return False

    async def watch(self, changed: Callable[[str | None], None], *,
                    task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Keep the daemon up until cancelled, telling `changed` its pipe directory whenever it
        comes to answer and None whenever it stops; stop ours at the end."""
        try:
            started = await self.start()
            if not started:
                self._say_down()
            self._set(started, changed)
            task_status.started()
            failures = 0
            while True:
                await trio.sleep(PROBE_INTERVAL_S if self.running else
                                 RESTART_BACKOFF_S[min(failures, len(RESTART_BACKOFF_S) - 1)])
                if await self.answers():
                    failures = 0
                    self._set(True, changed)
                    continue
                self._set(False, changed)
                if self.adopted:
                    continue  # its owner starts it again; we keep asking
                failures += 1
                self.restarts += 1
                # Once per outage: a daemon that cannot start is tried again quietly.
                (log.warning if failures == 1 else log.debug)(
                    "MPS: the control daemon does not answer (%s): starting it again",
                    self.problem)
                self._set(await self.start(), changed)
        finally:
            with trio.CancelScope(shield=True):
                await self.stop()

    def _set(self, running: bool, changed: Callable[[str | None], None]) -> None:
        if running == self.running:
            return
        self.running = running
        if running:
            self.problem = ""
        else:
            self._say_down()
        changed(str(self.pipe) if running else None)

    def _say_down(self) -> None:
        log.warning("MPS: the control daemon at %s is not running: %s; programs that start now "
                    "run as plain contexts", self.pipe, self.problem)

    async def stop(self) -> None:
        if not (self.started_by_us and self.running):
            return
        answer = await self.ask("quit")
        if answer is None:
            log.warning("MPS: the control daemon did not take quit: %s", self.problem)
        else:
            log.info("MPS: told the control daemon at %s to quit", self.pipe)
        self.running = False

    def status(self) -> dict:
        return {"enabled": True, "running": self.running, "pipe_directory": str(self.pipe),
                "log_directory": str(self.log_dir) if self.log_dir else None,
                "adopted": self.adopted, "restarts": self.restarts,
                "problem": self.problem or None}
