"""The `flood` part of make bench-abuse: four processes of the abusing user connect and hang up
in a loop, as fast as they can, while root uses the scheduler: `gemsharectl status` run one
after another (the real command, as a process each time: its time is mostly Python starting on
a machine the flood keeps busy), the same request's round trip through the Python client alone
(connecting included), then a new pair of programs whose lock handoffs are measured as
bench/handoff.py does. Also the scheduler's CPU meanwhile, and
whether any line root's doings caused was left out of the log.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import handoff
from abuser import loop_result, request, start_loop
from scheduler_process import SchedulerProcess

FLOODERS = 4
CTL_TIMEOUT_S = 5.0  # gemsharectl's default --timeout
WARMUP_S = 1.0  # the flood under way before root starts
TICKS = os.sysconf("SC_CLK_TCK")
SUPPRESSED = re.compile(r"suppressed (\d+) lines caused by (uid \d+)")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (utime and stime in /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def ctl_status(socket: Path) -> tuple[bool, float]:
    """`gemsharectl status --json --timeout 5` as root: whether it answered, and in how many
    seconds, from the command's start to its exit."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "gemshare_ctl", "--socket", str(socket), "status",
                           "--json", "--timeout", f"{CTL_TIMEOUT_S:g}"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=60)
    took = time.monotonic() - started
    try:
        answered = done.returncode == 0 and "clients" in json.loads(done.stdout)
    except json.JSONDecodeError:
        answered = False
    return answered, took


def round_trip(socket: Path) -> tuple[bool, float]:
    """A status request through the Python client, connecting included, within gemsharectl's
    timeout: whether it was answered, in how many seconds."""
    started = time.monotonic()
    answered = request(socket, {"op": "status"}, CTL_TIMEOUT_S)["ok"]
    return answered, time.monotonic() - started


def answered_in_a_row(tries: list[tuple[bool, float]]) -> int:
    """How many tries in a row were answered, from the first."""
    for index, (answered, _) in enumerate(tries):
        if not answered:
            return index
    return len(tries)


def suppressed(log: str) -> dict[str, int]:
    """Lines the per-user log budget left out, by whom they were caused."""
    found: dict[str, int] = {}
    for count, peer in SUPPRESSED.findall(log):
        found[peer] = found.get(peer, 0) + int(count)
    return found


def flood_part(directory: Path, status_tries: int, handoff_seconds: float) -> dict:
    scheduler = SchedulerProcess(directory, anti_thrash="on")  # as bench/handoff.py measures
    results: dict = {}
    flooders = []
    try:
        cpu_before, started = cpu_seconds(scheduler.process.pid), time.monotonic()
        flooders = [start_loop("connect-close", scheduler.socket, 3600)
                    for _ in range(FLOODERS)]
        time.sleep(WARMUP_S)
        for name, ask in (("ctl_status", ctl_status), ("round_trip", round_trip)):
            tries = [ask(scheduler.socket) for _ in range(status_tries)]
            took = sorted(seconds for _, seconds in tries)
            results.update({
                f"{name}_tries": len(tries),
                f"{name}_answered": sum(answered for answered, _ in tries),
                f"{name}_answered_in_a_row": answered_in_a_row(tries),
                f"{name}_median_s": round(took[len(took) // 2], 3),
                f"{name}_max_s": round(took[-1], 3)})
        try:
            pair = handoff.measure_on(scheduler.socket, 2, handoff_seconds, directory / "pair",
                                      scheduler.check_running).summary()
            results.update({"pair_handoff_p50_us": pair["p50_us"],
                            "pair_handoff_p99_us": pair["p99_us"],
                            "pair_handoff_samples": pair["samples"]})
        except RuntimeError as exc:  # the programs lost the scheduler: said, not measured
            results["pair_failed"] = str(exc)[:1000]
        results["scheduler_cpu_percent"] = round(
            100 * (cpu_seconds(scheduler.process.pid) - cpu_before) /
            (time.monotonic() - started), 1)
    finally:
        for flooder in flooders:
            flooder.terminate()
        done = [loop_result(flooder) for flooder in flooders]
        scheduler.stop()
    seconds = time.monotonic() - started
    connects = sum(loop.get("done", 0) for loop in done)
    results.update({"flood_connects_per_s": round(connects / seconds),
                    "flood_connects_failed": sum(loop.get("failed", 0) for loop in done)})
    log = scheduler.log_path.read_text(errors="replace")
    results["closed_over_rate"] = sum(
        int(count) for count in re.findall(r"closed (\d+) more connections of uid", log))
    results["root_lines_suppressed"] = suppressed(log).get("uid 0", 0)
    return results
