"""Lock handoff latency on the fake driver, through the real scheduler and the real libnvs.so.

N stand-in programs share one simulated GPU. Each one repeats: a marker call (cuStreamQuery, not
gated, logged by the fake driver), a burst of short kernels, then a sleep longer than the idle
release time (GEMSHARE_IDLE_RELEASE_MS, small here), so that its lock goes back early and the
lock moves from program to program many times a second, with no quantum to wait for.

One handoff, read from the fake driver's event log (CLOCK_MONOTONIC, shared by every process):
  start  the outgoing holder's last `ctx_sync` before the incoming holder's first launch. Every
         release here is an early (idle) one: libnvs synchronizes its contexts, and sends
         LOCK_RELEASED straight after that call returns (no quantum runs out, so no drop);
  end    the next holder's first `launch` event: its first submission reaching the driver.
A handoff counts only if the incoming program had already logged its marker before the release,
i.e. it was blocked at the gate waiting for the lock (otherwise the gap is its own idle time),
and only once every program is running (after the start signal and a short warm-up).
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "libnvs"))
import libnvs_fakelog  # noqa: E402  (the one reader of the fake driver's log format)
from libnvs_programs import FakeGpu, wait_file  # noqa: E402
from scheduler_process import SchedulerProcess  # noqa: E402

IDLE_RELEASE_MS = 2  # early release after 2 ms without a submission
BURST = ["launches", 4, 20]  # four 20 us kernels per turn
SLEEP_MS = 4  # longer than the idle release, shorter than a turn of the other programs
WARMUP_S = 0.3
# Fewer handoffs than this give no percentiles worth the name: a run goes on until it has them
# (polling the log), however short it was meant to be, up to PATIENCE_S more.
MIN_SAMPLES = 5
PATIENCE_S = 60.0
POLL_S = 0.25


@dataclass
class Handoffs:
    clients: int
    samples_us: list[float]
    skipped: int  # lock moves not counted: the next holder was not waiting yet

    def summary(self) -> dict:
        values = sorted(self.samples_us)
        return {"clients": self.clients, "samples": len(values), "skipped": self.skipped,
                "p50_us": percentile(values, 50), "p90_us": percentile(values, 90),
                "p99_us": percentile(values, 99), "max_us": values[-1] if values else math.nan}


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile: the smallest value with at least q% of the samples at or below."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def handoffs_from_log(events: list, since_ns: int, until_ns: int, clients: int) -> Handoffs:
    """Handoffs between programs in a time-ordered fake driver log (see the module docstring)."""
    last_launch: dict[int, int] = {}
    last_sync: dict[int, int] = {}
    last_marker: dict[int, int] = {}
    holder = None
    samples, skipped = [], 0
    for event in events:
        pid = event.pid
        if event.name == "stream_query":
            last_marker[pid] = event.ns
        elif event.name == "ctx_sync":
            last_sync[pid] = event.ns
        elif event.name == "launch":
            if holder is not None and holder != pid and since_ns <= event.ns <= until_ns:
                released = last_sync.get(holder, -1)
                # The release drain follows the old holder's last launch; the new holder asked
                # (its marker) before that release.
                if released > last_launch[holder] and last_marker.get(pid, math.inf) < released:
                    samples.append((event.ns - released) / 1000)
                else:
                    skipped += 1
            holder = pid
            last_launch[pid] = event.ns
    return Handoffs(clients, samples, skipped)


def client_steps(ready: Path, go: Path, rounds: int) -> list:
    turn = ["stream-query", *BURST, "sleep-ms", SLEEP_MS]
    return ["init", "touch-file", ready, "wait-file", go, *turn * rounds]


def measure(clients: int, seconds: float, directory: Path, args=(),
            during=contextlib.nullcontext) -> Handoffs:
    """Runs `clients` programs for `seconds` after they are all ready, against a scheduler of
    their own; their handoffs. `args` go on the scheduler's command line; `during(scheduler)`
    is a context that runs beside the measured seconds (other work the scheduler must do
    meanwhile)."""
    directory.mkdir(parents=True)
    # A config file given in `args` may take the scheduler a while to read.
    scheduler = SchedulerProcess(directory, args=args, start_timeout=300, anti_thrash="on")
    try:
        with during(scheduler):
            return measure_on(scheduler.socket, clients, seconds, directory,
                              scheduler.check_running)
    finally:
        scheduler.stop()


def measure_on(socket: Path, clients: int, seconds: float, directory: Path,
               check_scheduler=lambda: None) -> Handoffs:
    """Runs `clients` programs against the scheduler on `socket` for `seconds` after they are
    all ready, and on while fewer than MIN_SAMPLES handoffs were counted (a busy machine slows
    the first ones down), at most PATIENCE_S more; their handoffs."""
    directory.mkdir(parents=True, exist_ok=True)
    gpu = FakeGpu(directory, socket)
    # More turns than the run can use: the programs are stopped when time is up.
    rounds = math.ceil((seconds + PATIENCE_S + 5) * 1000 / SLEEP_MS)
    env = {"GEMSHARE_IDLE_RELEASE_MS": str(IDLE_RELEASE_MS)}
    go = gpu.path("go")
    try:
        programs = [gpu.start(client_steps(gpu.path(f"ready-{index}"), go, rounds), env=env)
                    for index in range(clients)]
        for index in range(clients):
            wait_file(gpu.path(f"ready-{index}"), timeout=120)
        go.touch()
        since_ns = time.monotonic_ns() + int(WARMUP_S * 1e9)  # CLOCK_MONOTONIC, as in the log
        time.sleep(WARMUP_S + seconds)
        patience = time.monotonic() + PATIENCE_S
        while True:
            end_ns = time.monotonic_ns()
            counted = handoffs_from_log(libnvs_fakelog.read_events(gpu.log), since_ns, end_ns,
                                        clients)
            if len(counted.samples_us) >= MIN_SAMPLES or time.monotonic() > patience:
                break
            time.sleep(POLL_S)
        check_scheduler()
        for program in programs:
            if program.process.poll() is not None:
                raise RuntimeError(f"a stand-in stopped before the end of the run:\n"
                                   f"{program.result().describe()[-4000:]}")
            # libnvs only writes to stderr (without GEMSHARE_DEBUG) to warn, e.g. that it lost
            # the scheduler and ran unscheduled: such a run does not measure handoffs.
            warnings = program.result().gemshare_lines()
            if warnings:
                raise RuntimeError(f"stand-in {program.pid} warned: {warnings[:3]}")
    finally:
        gpu.stop_all()
    # Read again once every program has stopped: an event is written just after its time.
    events = libnvs_fakelog.read_events(gpu.log)
    return handoffs_from_log(events, since_ns, end_ns, clients)
