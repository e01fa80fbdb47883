"""An oversubscribed pair with idle gaps, on the fake driver, through the real scheduler and the
real libnvs.so: does one program run in the other's idle gaps when a handoff costs less than the
gap, and keep out of them when it costs more?

Two stand-ins of PROGRAM_MIB each on a DEVICE_MIB device (so that every handoff moves memory:
272 MiB each way), each repeating PASS_US of GPU work (a "sleep" kernel and a synchronization)
then GAP_MS of sleeping. Memory moves at a given rate (FAKECUDA_MIGRATE_GBPS), which makes
lending a gap and taking it back (four moves) cost:

  fast   4 GB/s: 0.29 s, well under the 1 s gap (the issue's fake-driver pair);
  tight  1.33 GB/s: 0.86 s, as two 16 GiB programs under a 24 GiB capacity at an H200's 46 GB/s
         out and 43 GB/s in; before gaps were lent, a holder kept the device through such gaps;
  slow   0.25 GB/s: 4.6 s, more than the gap: nothing should be lent.

  one after another  each program alone without libnvs.so; on the fake driver programs never
                     compete (each has its own simulated device), so one after the other takes
                     the sum of their times, measured here side by side;
  together           both under libnvs.so with a scheduler of their own (mode `on`, TQ 10).

Each run reports the seconds from the start signal to the last program's end, its ratio to one
after another, and what the scheduler did (from its log): grants, grants that filled another's
idle gap, and drops.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "libnvs"))
from libnvs_programs import FakeGpu, Program, wait_file  # noqa: E402
from scheduler_log import lock_events  # noqa: E402
from scheduler_process import SchedulerProcess  # noqa: E402

DEVICE_MIB = 4096
PROGRAM_MIB = 1800
PASS_US = 250_000
GAP_MS = 1000
TQ = 10
RATES_GBPS = {"fast": 4.0, "tight": 1.33, "slow": 0.25}
TARGETS = {"fast": 0.8, "tight": 0.8}  # ratio to one after another, at most
RUN_TIMEOUT_S = 300
LOANS = re.compile(r"\bgrant client [^\n]*in the idle gap of")


def steps(passes: int) -> list:
    return ["alloc", "a", f"{PROGRAM_MIB}M",
            *["launch", PASS_US, "stream-sync", "sleep-ms", GAP_MS] * passes]


def run_both(gpu: FakeGpu, passes: int, preload: bool, env: dict) -> list[float]:
    """Both programs from one start signal; each one's seconds from the signal to its end."""
    go = gpu.path("go")
    go.unlink(missing_ok=True)
    programs: list[Program] = []
    for index in range(2):
        ready = gpu.path(f"ready-{index}")
        ready.unlink(missing_ok=True)
        programs.append(gpu.start(["init", "touch-file", ready, "wait-file", go, *steps(passes)],
                                  preload=preload, env=env))
    for index in range(2):
        wait_file(gpu.path(f"ready-{index}"), timeout=60)
    go.touch()
    start = time.monotonic()
    ends = []
    for program in programs:
        result = program.wait(RUN_TIMEOUT_S)
        if result.returncode != 0:
            raise RuntimeError(f"a stand-in failed:\n{result.describe()[-4000:]}")
        ends.append(time.monotonic() - start)
    return ends


def together(directory: Path, passes: int, gbps: float) -> dict:
    directory.mkdir(parents=True)
    scheduler = SchedulerProcess(directory, anti_thrash="on", tq=TQ)
    gpu = FakeGpu(directory, scheduler.socket, f"{DEVICE_MIB}M")
    # Moves by the driver's migration, whose time the fake takes from the rate; new memory stays
    # where it is first touched.
    env = {"GEMSHARE_MOVE_COPY": "0", "GEMSHARE_POPULATE": "0", "FAKECUDA_MIGRATE_GBPS": str(gbps)}
    try:
        seconds = max(run_both(gpu, passes, True, env))
        scheduler.check_running()
    finally:
        gpu.stop_all()
        scheduler.stop()
    log = scheduler.log_path.read_text()
    events = lock_events(log)
    return {"seconds": seconds, "grants": events["grants"], "drops": events["drops"],
            "early_releases": events["early_releases"], "gap_grants": len(LOANS.findall(log))}


def measure(directory: Path, passes: int) -> dict:
    alone = FakeGpu(directory / "alone", directory / "no-scheduler.sock", f"{DEVICE_MIB}M")
    (directory / "alone").mkdir(parents=True)
    try:
        serial = sum(run_both(alone, passes, False, {}))
    finally:
        alone.stop_all()
    result = {"passes": passes, "pass_s": PASS_US / 1e6, "gap_s": GAP_MS / 1000,
              "program_mib": PROGRAM_MIB, "device_mib": DEVICE_MIB, "tq": TQ,
              "one_after_another_s": serial}
    for name, gbps in RATES_GBPS.items():
        run = together(directory / name, passes, gbps)
        result[name] = {"gbps": gbps, **run, "ratio": run["seconds"] / serial}
    return result


def print_gap_pair(result: dict) -> None:
    print(f"oversubscribed pair with idle gaps (fake driver): 2 x {result['program_mib']} MiB "
          f"on {result['device_mib']} MiB, {result['passes']} passes of {result['pass_s']:g} s "
          f"work and {result['gap_s']:g} s gap, TQ {result['tq']} s; one after another "
          f"{result['one_after_another_s']:.1f} s")
    for name in RATES_GBPS:
        run = result[name]
        target = TARGETS.get(name)
        verdict = "" if target is None else \
            f", target <= {target:g}: " + ("met" if run["ratio"] <= target else "MISSED")
        print(f"  moves at {run['gbps']:g} GB/s ({name}): together {run['seconds']:.1f} s "
              f"({run['ratio']:.2f} of one after another{verdict}); {run['grants']} grants, "
              f"{run['gap_grants']} in the other's idle gaps, {run['drops']} drops, "
              f"{run['early_releases']} early releases")
