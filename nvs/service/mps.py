"""The NVIDIA MPS control daemon the scheduler runs with --mps: started with pipe and log
directories of its own beside the scheduler's socket (or adopted, by its pipe directory),
watched, started again when it dies, and told to quit when the scheduler stops.

Everything goes through `nvidia-cuda-mps-control` from PATH: `-d` starts the daemon, and the
same program with no argument sends it one command on stdin (`get_server_list` answers whether
it is alive; `quit` ends it). Each call runs as a child process under a deadline, killed when it
passes, so a daemon that hangs can hold up neither the event loop nor the scheduler's exit.

All of it runs beside serving, never before: the scheduler serves from its first moment, and
until the daemon answers, programs run as plain contexts under the lock, as while it is down.
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
COMMAND_TIMEOUT_S = 10.0  # a call of the control program that takes longer is killed
READY_TIMEOUT_S = 10.0  # from `-d` to its first answer
# Waits after each failed start (or, for an adopted daemon, each unanswered probe) in a row;
# the last repeats.
RETRY_S = (1.0, 5.0, 30.0)
STARTING = "starting: it has not answered yet"


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
        self.problem = STARTING  # why it is not running, for status

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

    async def _run(self, argv: list[str], **options) -> subprocess.CompletedProcess | None:
        """The control program run to its end; None when it did not end within
        COMMAND_TIMEOUT_S, and was killed."""
        with trio.move_on_after(COMMAND_TIMEOUT_S):
            return await trio.run_process(argv, check=False, env=self.environment(),
                                          deliver_cancel=_kill, **options)
        return None

    async def ask(self, command: str) -> str | None:
        """The daemon's answer to one command; None when it does not answer."""
        executable = shutil.which(self.program)
        if executable is None:
            self.problem = f"{self.program} is not on PATH"
            return None
        done = await self._run([executable], stdin=(command + "\n").encode(),
                               capture_stdout=True, capture_stderr=True)
        if done is not None:
            if done.returncode == 0:
                return done.stdout.decode(errors="replace").strip()
            said = (done.stderr or done.stdout).decode(errors="replace").strip()
            self.problem = f"{self.program} exited with status {done.returncode}" + \
                (f": {said.splitlines()[-1][:200]}" if said else "")
            return None
        self.problem = (f"{self.program} did not answer {command!r} within "
                        f"{COMMAND_TIMEOUT_S:g} s, and was killed")
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
            done = await self._run([executable, "-d"], stdin=b"", stdout=subprocess.DEVNULL,
                                   stderr=said)
            if done is None:
                self.problem = (f"{self.program} -d did not return within "
                                f"{COMMAND_TIMEOUT_S:g} s, and was killed")
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

    async def watch(self, changed: Callable[[str | None], None]) -> None:
        """Keep the daemon up until cancelled, telling `changed` its pipe directory whenever it
        comes to answer and None whenever it stops; stop ours at the end. One line per outage:
        the starts that fail after the first are tried again quietly."""
        try:
            failures = 0  # starts in a row that did not bring it to answer
            told = False  # whether this outage (or the failed first start) has had its line
            while True:
                if await self.start():
                    failures, told = 0, False
                    self._set(True, changed)
                    while True:
                        await trio.sleep(PROBE_INTERVAL_S)
                        if not await self.answers():
                            break
                    self._set(False, changed)  # the outage's line
                    told = True
                    if not self.adopted:
                        self.restarts += 1
                    continue  # started again at once
                if not told:
                    self._say_down()
                    told = True
                else:
                    log.debug("MPS: the control daemon at %s still does not answer: %s",
                              self.pipe, self.problem)
                await trio.sleep(RETRY_S[min(failures, len(RETRY_S) - 1)])
                failures += 1
        finally:
            with trio.CancelScope(shield=True):
                await self.stop()

    def _set(self, running: bool, changed: Callable[[str | None], None]) -> None:
        if running == self.running:
            return
        self.running = running
        if running:
            self.problem = ""
        elif self.adopted:
            log.warning("MPS: the adopted control daemon at %s stopped answering (%s); asking "
                        "again until its owner starts it again", self.pipe, self.problem)
        else:
            log.warning("MPS: the control daemon at %s stopped answering (%s): starting it "
                        "again", self.pipe, self.problem)
        changed(str(self.pipe) if running else None)

    def _say_down(self) -> None:
        """The first start that failed, when the daemon never answered."""
        what = "the adopted control daemon at %s does not answer" if self.adopted else \
            "cannot start the control daemon at %s"
        log.warning("MPS: " + what + ": %s; programs run as plain contexts until it answers "
                    "(tried again in the background, at last every %g s)", self.pipe,
                    self.problem, RETRY_S[-1])

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
        """For gemsharectl status and the metrics; `problem` says why it does not run (also
        while it starts: STARTING)."""
        return {"enabled": True, "running": self.running, "pipe_directory": str(self.pipe),
                "log_directory": str(self.log_dir) if self.log_dir else None,
                "adopted": self.adopted, "restarts": self.restarts,
                "problem": self.problem or None}


async def _kill(process: trio.Process) -> None:
    """How a call that ran past its deadline ends: at once (trio's own way waits 5 s after
    SIGTERM, which a hung program may ignore)."""
    process.kill()
