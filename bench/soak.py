"""make bench-soak: an hour of a busy node compressed into a few minutes, against one scheduler.

One real gemshare-scheduler runs throughout. Before and after the soak the bench measures what a
long run could wear down: the scheduler's resident memory (VmRSS) and open file descriptors, and
the lock handoff latency between two stand-in programs (bench/handoff.py's measurement, on this
scheduler). In between, three kinds of traffic run at once:

  programs  stand-in CUDA programs under libnvs.so on the fake driver come and go, a few at a
            time: each allocates, launches bursts of short kernels with pauses that make it give
            its lock back early, frees and exits; one in five is killed with SIGKILL mid-run.
            A program that fails on its own, or warns on stderr (e.g. that it lost the
            scheduler), is counted as a failure;
  fuzz      connections with random, odd and broken frames, from
            tests/wire/test_scheduler_fuzz_frames.py (each checks that the scheduler
            closed it, if at all, with the ERROR its last frame deserves);
  control   gemsharectl's requests: status many times a second, and every half second a `set`
            (TQ and mode) or a `client` request for a running program; the settings are
            cleared again before the final measurement.

Environment: BENCH_SOAK_SECONDS (default 180), BENCH_QUICK=1 (a few seconds; checks that the
bench works, publishes nothing), BENCH_JSON=path, GEMSHARE_BUILD_DIR (default <repo>/build).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(REPO / "tests" / "wire"))
import handoff  # noqa: E402
import test_scheduler_fuzz_frames as fuzz  # noqa: E402
from libnvs_programs import FakeGpu  # noqa: E402
from run_cpu import built_results, title  # noqa: E402
from scheduler_process import SchedulerProcess  # noqa: E402
from scheduler_scale import resident_kib  # noqa: E402

from gemshare_nvs.wire.connection import Connection  # noqa: E402

SEED = 20261125


@dataclass
class Plan:
    soak_seconds: float
    handoff_seconds: float
    programs_at_once: int
    fuzz_pause_s: float  # between fuzz connections
    status_pause_s: float
    change_pause_s: float  # between set/client requests


FULL = Plan(180.0, 5.0, 6, 0.01, 0.05, 0.5)
QUICK = Plan(4.0, 0.5, 3, 0.02, 0.1, 0.5)


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mib(pid: int) -> float:
    return resident_kib(pid)[0] / 1024


def program_steps(rng: random.Random) -> list:
    """A short program: allocate, bursts of kernels with pauses past the early release, free."""
    steps = ["init", "alloc", "a", f"{rng.choice((1, 2, 4))}M"]
    for _ in range(rng.randrange(2, 12)):
        steps += ["launches", rng.randrange(1, 6), rng.choice((20, 100, 500)),
                  "sleep-ms", rng.choice((5, 10, 20, 50))]
    return steps + ["sync", "free", "a"]


@dataclass
class Counters:
    lock: threading.Lock = field(default_factory=threading.Lock)
    values: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)  # the first few, for the report

    def add(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.values[key] = self.values.get(key, 0) + n

    def problem(self, key: str, text: str) -> None:
        self.add(key)
        with self.lock:
            if len(self.problems) < 10:
                self.problems.append(f"{key}: {text[:2000]}")


def churn_programs(gpu: FakeGpu, plan: Plan, stop: threading.Event, counters: Counters,
                   live_pids: list) -> None:
    rng = random.Random(SEED)
    env = {"GEMSHARE_IDLE_RELEASE_MS": "5"}
    running = []  # (program, deadline to kill it or None)
    while not stop.is_set() or running:
        now = time.monotonic()
        for entry in list(running):
            program, kill_at = entry
            if program.process.poll() is None and (stop.is_set() or
                                                   (kill_at is not None and now >= kill_at)):
                program.process.send_signal(signal.SIGKILL)
                program.process.wait()
                counters.add("programs_killed")
            if program.process.poll() is None:
                continue
            running.remove(entry)
            result = program.result()
            if kill_at is None or result.returncode != -signal.SIGKILL:
                if result.returncode != 0 and not stop.is_set():
                    counters.problem("program_failures", result.describe()[-1500:])
                elif result.gemshare_lines():
                    counters.problem("program_warnings", "\n".join(result.gemshare_lines()))
            # Their output files are not needed past this point.
            for suffix in (".out", ".err"):
                Path(str(program._out)[:-4] + suffix).unlink(missing_ok=True)
        live_pids[:] = [program.pid for program, _ in running]
        while not stop.is_set() and len(running) < plan.programs_at_once:
            kill_at = now + rng.uniform(0.05, 1.0) if rng.random() < 0.2 else None
            running.append((gpu.start(program_steps(rng), env=env), kill_at))
            counters.add("programs_started")
        time.sleep(0.01)


def fuzz_connections(socket: Path, plan: Plan, stop: threading.Event,
                     counters: Counters) -> None:
    rng = random.Random(SEED + 1)
    while not stop.is_set():
        try:
            frames = fuzz.send_counted(socket, *fuzz.fuzz_connection(rng))
            counters.add("fuzz_connections")
            counters.add("fuzz_frames", frames)
        except Exception as exc:  # noqa: BLE001  (a finding to report, not a crash)
            counters.problem("fuzz_failures", repr(exc))
        time.sleep(plan.fuzz_pause_s)


def control_traffic(socket: Path, plan: Plan, stop: threading.Event, counters: Counters,
                    live_pids: list) -> None:
    rng = random.Random(SEED + 2)
    next_change = time.monotonic() + plan.change_pause_s
    while not stop.is_set():
        try:
            with Connection(socket, timeout=10) as connection:
                while not stop.is_set():
                    request = {"op": "status"}
                    if time.monotonic() >= next_change:
                        next_change = time.monotonic() + plan.change_pause_s
                        pids = list(live_pids)
                        if pids and rng.random() < 0.3:
                            request = {"op": "client", "pid": rng.choice(pids),
                                       "weight": rng.choice((0.5, 1, 2))}
                        else:
                            request = {"op": "set", "tq": rng.choice((1, 2, 5, 30)),
                                       "anti_thrash": rng.choice(("on", "auto"))}
                    reply = connection.request(request)
                    counters.add("control_requests")
                    # A client request may name a program that has just exited.
                    if not reply.get("ok") and reply.get("code") != "invalid":
                        counters.problem("control_failures", json.dumps(reply))
                    time.sleep(plan.status_pause_s)
        except Exception as exc:  # noqa: BLE001
            counters.problem("control_failures", repr(exc))
            time.sleep(0.1)


def snapshot(pid: int) -> dict:
    return {"rss_mib": round(rss_mib(pid), 2), "fds": open_fds(pid)}


def settle(socket: Path, seconds: float = 10.0) -> int:
    """Waits until the scheduler has no clients left (every program gone); how many remain."""
    deadline = time.monotonic() + seconds
    while True:
        with Connection(socket, timeout=10) as connection:
            status = connection.request({"op": "status"})["status"]
        if not status["clients"] or time.monotonic() > deadline:
            return len(status["clients"])
        time.sleep(0.1)


def run(plan: Plan, seconds: float) -> dict:
    results = built_results(plan is QUICK, soak_seconds=seconds)
    with tempfile.TemporaryDirectory(prefix="gs-soak-", dir="/tmp") as scratch:
        directory = Path(scratch)
        scheduler = SchedulerProcess(directory, anti_thrash="on")
        pid = scheduler.process.pid
        try:
            start = snapshot(pid)
            first = handoff.measure_on(scheduler.socket, 2, plan.handoff_seconds,
                                       directory / "handoff-start").summary()
            counters = Counters()
            stop = threading.Event()
            live_pids: list = []
            gpu = FakeGpu(directory / "soak", scheduler.socket)
            gpu.dir.mkdir()
            workers = [
                threading.Thread(target=churn_programs,
                                 args=(gpu, plan, stop, counters, live_pids)),
                threading.Thread(target=fuzz_connections,
                                 args=(scheduler.socket, plan, stop, counters)),
                threading.Thread(target=control_traffic,
                                 args=(scheduler.socket, plan, stop, counters, live_pids)),
            ]
            for worker in workers:
                worker.start()
            timeline, began = [], time.monotonic()
            try:
                while time.monotonic() - began < seconds:
                    time.sleep(min(5.0, max(0.1, seconds / 20)))
                    scheduler.check_running()
                    timeline.append({"t_s": round(time.monotonic() - began, 1),
                                     **snapshot(pid)})
            finally:
                stop.set()
                for worker in workers:
                    worker.join(60)
            with Connection(scheduler.socket, timeout=10) as connection:
                connection.request({"op": "set", "clear": True})
            clients_left = settle(scheduler.socket)
            last = handoff.measure_on(scheduler.socket, 2, plan.handoff_seconds,
                                      directory / "handoff-end").summary()
            clients_left = max(clients_left, settle(scheduler.socket))
            end = snapshot(pid)
            scheduler.check_running()
            traceback = "Traceback" in scheduler.log_path.read_text()
        finally:
            scheduler.stop()
    values = counters.values
    results.update({
        "soak_rss_start_mib": start["rss_mib"], "soak_rss_end_mib": end["rss_mib"],
        "soak_rss_peak_mib": max([start["rss_mib"], end["rss_mib"],
                                  *(s["rss_mib"] for s in timeline)]),
        "soak_fds_start": start["fds"], "soak_fds_end": end["fds"],
        "soak_fds_peak": max([start["fds"], end["fds"], *(s["fds"] for s in timeline)]),
        "soak_handoff_p50_start_us": first["p50_us"], "soak_handoff_p99_start_us": first["p99_us"],
        "soak_handoff_p50_end_us": last["p50_us"], "soak_handoff_p99_end_us": last["p99_us"],
        "soak_handoff_samples_start": first["samples"], "soak_handoff_samples_end": last["samples"],
        "soak_programs_started": values.get("programs_started", 0),
        "soak_programs_killed": values.get("programs_killed", 0),
        "soak_program_failures": values.get("program_failures", 0),
        "soak_program_warnings": values.get("program_warnings", 0),
        "soak_fuzz_connections": values.get("fuzz_connections", 0),
        "soak_fuzz_frames": values.get("fuzz_frames", 0),
        "soak_fuzz_failures": values.get("fuzz_failures", 0),
        "soak_control_requests": values.get("control_requests", 0),
        "soak_control_failures": values.get("control_failures", 0),
        "soak_clients_left": clients_left,
        "soak_scheduler_tracebacks": traceback,
    })
    results["details"] = {"handoff_start": first, "handoff_end": last, "timeline": timeline,
                          "problems": counters.problems}
    results["environment"]["loadavg_1min_after"] = os.getloadavg()[0]
    return results


def print_table(results: dict) -> None:
    print(title(f"bench-soak | {results['soak_seconds']:g} s", results))
    print(f"{'':<32}{'start':>10}{'end':>10}{'peak':>10}")
    print(f"{'scheduler VmRSS (MiB)':<32}{results['soak_rss_start_mib']:>10.1f}"
          f"{results['soak_rss_end_mib']:>10.1f}{results['soak_rss_peak_mib']:>10.1f}")
    print(f"{'scheduler open fds':<32}{results['soak_fds_start']:>10}"
          f"{results['soak_fds_end']:>10}{results['soak_fds_peak']:>10}")
    for what in ("p50", "p99"):
        print(f"{'handoff ' + what + ' (us, 2 programs)':<32}"
              f"{results[f'soak_handoff_{what}_start_us']:>10.0f}"
              f"{results[f'soak_handoff_{what}_end_us']:>10.0f}")
    print(f"programs: {results['soak_programs_started']} started, "
          f"{results['soak_programs_killed']} killed, {results['soak_program_failures']} failed, "
          f"{results['soak_program_warnings']} warned; fuzz: "
          f"{results['soak_fuzz_connections']} connections, {results['soak_fuzz_frames']} "
          f"frames, {results['soak_fuzz_failures']} failed; control: "
          f"{results['soak_control_requests']} requests, {results['soak_control_failures']} "
          f"failed; clients left {results['soak_clients_left']}; tracebacks in the log: "
          f"{'yes' if results['soak_scheduler_tracebacks'] else 'no'}")
    for problem in results["details"]["problems"]:
        print(f"  {problem.splitlines()[0][:160]}")


def main() -> int:
    quick = os.environ.get("BENCH_QUICK", "") not in ("", "0")
    plan = QUICK if quick else FULL
    text = os.environ.get("BENCH_SOAK_SECONDS") or f"{plan.soak_seconds:g}"
    try:
        seconds = float(text)
        if not 1 <= seconds <= 86400:
            raise ValueError
    except ValueError:
        print(f"bench-soak: BENCH_SOAK_SECONDS must be a number of seconds from 1 to 86400, "
              f"not {text!r}", file=sys.stderr)
        return 2
    results = run(plan, seconds)
    if os.environ.get("BENCH_JSON"):
        Path(os.environ["BENCH_JSON"]).write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    broken = [key for key in ("soak_program_failures", "soak_fuzz_failures",
                              "soak_control_failures", "soak_clients_left") if results[key]]
    if broken or results["soak_scheduler_tracebacks"]:
        print(f"bench-soak: the scheduler did not come through cleanly: {', '.join(broken)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
