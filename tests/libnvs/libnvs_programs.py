"""Running the stand-in CUDA programs on the fake driver, with or without libnvs.so.

Every process of a test shares one simulated GPU: one event log, one device memory (through
FAKECUDA_SHARED_DEVICE) and one scheduler socket. Stand-ins print one line per step,
"<step> key=value ... result=N error=NAME", which `Result` parses.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from gemshare_nvs.wire.connection import Connection

import libnvs_fakelog

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("GEMSHARE_BUILD_DIR") or REPO / "build").resolve()
FAKECUDA = BUILD / "fakecuda"
LIBNVS = BUILD / "libnvs.so"
# What the fake driver's managed allocations show in /proc/PID/maps (fake_memory.c), where a
# driver's show /dev/nvidia-uvm: the scheduler's GEMSHARE_UVM_MAPPING for the fake GPU.
FAKE_UVM_MAPPING = "/memfd:nvidia-uvm (deleted)"
TSAN_LIBNVS = BUILD / "tsan" / "libnvs.so"

# Generous limits that only catch hangs; nothing asserts speed.
RUN_TIMEOUT = 60.0
WAIT_TIMEOUT = 30.0

# Variables of the caller that would change what a test means.
SCRUBBED_PREFIXES = ("GEMSHARE_", "FAKECUDA_", "TSAN_")
SCRUBBED = {"LD_PRELOAD", "LD_LIBRARY_PATH"}


def make(*targets: str, **variables: str) -> None:
    """Builds with the top-level Makefile into BUILD; a failure shows make's output. One make at
    a time: tests run in parallel processes, and two makes of one file would write it at once."""
    command = ["make", "-s", *targets, f"BUILD={BUILD}",
               *(f"{k}={v}" for k, v in variables.items())]
    BUILD.mkdir(parents=True, exist_ok=True)
    with open(BUILD / ".make.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n"
                           f"{done.stdout}\n{done.stderr}")


def parse_output(text: str) -> list[tuple[str, dict]]:
    steps = []
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        fields = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        steps.append((words[0], fields))
    return steps


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    pid: int

    def steps(self, name: str) -> list[dict]:
        return [fields for step, fields in parse_output(self.stdout) if step == name]

    def one(self, name: str) -> dict:
        found = self.steps(name)
        assert len(found) == 1, f"expected one '{name}' line, got {len(found)}:\n{self.describe()}"
        return found[0]

    def ok(self, name: str) -> dict:
        """The single `name` step, which must have succeeded."""
        fields = self.one(name)
        assert fields.get("result") == "0", f"step {name} failed: {fields}\n{self.describe()}"
        return fields

    def pointers(self) -> dict[str, int]:
        """The device pointer of each named buffer the stand-in allocated."""
        return {fields["name"]: int(fields["ptr"], 16)
                for step in ("alloc", "alloc-async", "alloc-managed")
                for fields in self.steps(step)}

    def describe(self) -> str:
        return (f"exit status {self.returncode}\n--- stdout ---\n{self.stdout}"
                f"--- stderr ---\n{self.stderr}")

    def gemshare_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("gemshare[")]


class Program:
    """A stand-in running in the background."""

    def __init__(self, command: list[str], env: dict, directory: Path, label: str):
        self._out = directory / f"{label}.out"
        self._err = directory / f"{label}.err"
        with open(self._out, "wb") as out, open(self._err, "wb") as err:
            self.process = subprocess.Popen(command, env=env, stdout=out, stderr=err,
                                            stdin=subprocess.DEVNULL, cwd=directory)
        self.pid = self.process.pid

    def output(self) -> str:
        return self._out.read_text(errors="replace")

    def wait(self, timeout: float = RUN_TIMEOUT) -> Result:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"stand-in {self.pid} hung for {timeout} s:\n"
                                 f"{self.result().describe()}") from None
        return self.result()

    def result(self) -> Result:
        return Result(self.process.returncode, self.output(),
                      self._err.read_text(errors="replace"), self.pid)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class FakeGpu:
    """The simulated GPU of one test and the way to run programs on it."""

    def __init__(self, directory: Path, socket: Path, device_mem: str = "64M"):
        self.dir = directory
        self.socket = socket
        self.log = directory / "fakecuda.log"
        self.device_mem = device_mem
        self._programs: list[Program] = []
        self._count = 0
        # Environment every program of this GPU gets, before a start's own `env`.
        self.base_env: dict = {}

    def env(self, *, preload: bool | Path = True, extra: dict | None = None) -> dict:
        env = {k: v for k, v in os.environ.items()
               if k not in SCRUBBED and not k.startswith(SCRUBBED_PREFIXES)}
        env.update({
            "LD_LIBRARY_PATH": str(FAKECUDA),
            "FAKECUDA_LOG": str(self.log),
            "FAKECUDA_DEVICE_MEM": self.device_mem,
            "FAKECUDA_SHARED_DEVICE": str(self.dir / "shared-device"),
            # Never the system's /var/run/gemshare socket, even when a test starts no scheduler.
            "GEMSHARE_SOCKET": str(self.socket),
        })
        if preload:
            env["LD_PRELOAD"] = str(LIBNVS if preload is True else preload)
        env.update(self.base_env)
        env.update(extra or {})
        return env

    @staticmethod
    def command(steps: list[str], resolve: str = "procaddr", ptsz: bool = False) -> list[str]:
        program = "standin_linked" if resolve == "linked" else "standin"
        return [str(FAKECUDA / program), "--resolve", resolve, *(["--ptsz"] if ptsz else []),
                *map(str, steps)]

    def start(self, steps: list, *, resolve: str = "procaddr", ptsz: bool = False,
              preload: bool | Path = True, env: dict | None = None,
              command: list[str] | None = None) -> Program:
        self._count += 1
        program = Program(command or self.command(steps, resolve, ptsz),
                          self.env(preload=preload, extra=env), self.dir, f"p{self._count}")
        self._programs.append(program)
        return program

    def run(self, steps: list, *, timeout: float = RUN_TIMEOUT, **options) -> Result:
        return self.start(steps, **options).wait(timeout)

    def events(self) -> list[libnvs_fakelog.Event]:
        return libnvs_fakelog.read_events(self.log)

    def path(self, name: str) -> Path:
        """A coordination file for wait-file / touch-file steps."""
        return self.dir / name

    def stop_all(self) -> None:
        for program in self._programs:
            program.kill()


def wait_for(predicate, what: str, timeout: float = WAIT_TIMEOUT, interval: float = 0.02):
    """Polls until predicate() is truthy and returns it; fails naming `what` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def scheduler_status(socket: Path) -> dict:
    with Connection(socket) as connection:
        reply = connection.request({"op": "status"})
    assert reply.get("ok"), reply
    return reply["status"]


def client_of(status: dict, pid: int) -> dict | None:
    return next((c for c in status["clients"] if c["pid"] == pid), None)


def state_of(socket: Path, pid: int) -> str | None:
    """holding, waiting or idle; None when no client has this pid."""
    return (client_of(scheduler_status(socket), pid) or {}).get("state")


def wait_for_client(socket: Path, pid: int, state: str | None = None, **values) -> dict:
    """The scheduler's record of the client with this pid, once it exists (in that state, and
    with these values in its status entry: weight=2, ...)."""
    if state is not None:
        values["state"] = state

    def found():
        client = client_of(scheduler_status(socket), pid)
        return client if client and all(client.get(key) == value
                                        for key, value in values.items()) else None
    return wait_for(found, f"pid {pid} as a scheduler client" +
                    "".join(f", {key} {value}" for key, value in values.items()))


# Only a drop-lock (or death) may take the lock from a process with this environment.
NO_EARLY_RELEASE = {"GEMSHARE_IDLE_RELEASE_MS": "0"}


def start_holder(gpu: FakeGpu, work: list | None = None) -> Program:
    """A process that takes the GPU lock with `work` and keeps it until it is killed."""
    holder = gpu.start(["init", *(work or ["launch", 100, "sync"]), "touch-file",
                        gpu.path("held"), "wait-file", gpu.path("never")], env=NO_EARLY_RELEASE)
    wait_file(gpu.path("held"))
    wait_for_client(gpu.socket, holder.pid, state="holding")
    return holder


def grants(scheduler_log: str, pid: int) -> int:
    """How many times the scheduler logged granting the lock to the client with this pid."""
    return len(re.findall(rf"\bgrant client \d+ \(pid {pid},", scheduler_log))


def wait_file(path: Path, timeout: float = WAIT_TIMEOUT) -> None:
    wait_for(path.exists, f"{path.name} to be created", timeout)


def run_together(gpu: FakeGpu, steps: list, count: int = 2, env: dict | None = None) -> list:
    """`count` stand-ins that initialize, then run `steps` from the same moment; their results,
    each of which must have succeeded."""
    programs = [gpu.start(["init", "touch-file", gpu.path(f"ready-{i}"), "wait-file",
                           gpu.path("go"), *steps], env=env) for i in range(count)]
    for i in range(count):
        wait_file(gpu.path(f"ready-{i}"))
    gpu.path("go").touch()
    results = [program.wait() for program in programs]
    for result in results:
        assert result.returncode == 0, result.describe()
    return results


PAIR_KERNEL_US = 100_000


def run_pair_in_auto(gpu_with, allocation: str, **options):
    """Two processes that each allocate `allocation`, and once the scheduler (mode auto, a 1 s
    quantum, `options` besides) knows both sizes, run 1.5 s of kernels each."""
    gpu, scheduler = gpu_with(tq=1, anti_thrash="auto", context_reserve_mib=1, **options)
    programs = [gpu.start(["init", "alloc", "buf", allocation, "touch-file",
                           gpu.path(f"allocated-{i}"), "wait-file", gpu.path("go"),
                           *["launch", PAIR_KERNEL_US, "stream-sync"] * 15]) for i in range(2)]
    for i in range(2):
        wait_file(gpu.path(f"allocated-{i}"))

    def both_reported():
        status = scheduler_status(scheduler.socket)
        return all((client_of(status, p.pid) or {}).get("allocated_bytes", 0) > 0
                   for p in programs)

    wait_for(both_reported, "both processes' allocations to reach the scheduler")
    gpu.path("go").touch()
    results = [program.wait() for program in programs]
    for result in results:
        assert result.returncode == 0, result.describe()
    return gpu, scheduler, results
