"""make bench-abuse: what one unprivileged local user can take from everyone else, measured on
the fake driver with real schedulers; prints a table, writes JSON.

The abuse itself runs in bench/abuse_loops.py, as uid 65534 when this runs as root (else as the
user running it: the figures then show what a user does to its own scheduler). Parts:
  control    that user holds 64 control connections: are root's status and set answered?
  logs       log bytes a second from that user's loops: half a frame and hang up, register
             and hang up, request and release the lock
  metrics    scrapes answered (3, 2 s each) beside 8 and 80 slow HTTP connections
  handoff    the lock handoff (2 programs, bench/handoff.py) alone, and beside each abuse: slow
             HTTP connections, the half-frame loop, a status loop, reloads of 4,000 rules
  reload     start-up and reload time with 1,000, 2,000 and 4,000 rules; SIGTERM during a
             4,000-rule reload; a config file replaced by a FIFO (reload, then SIGTERM)
  state      a start with settings.json nested 100,000 deep, a FIFO, a directory
  signals    SIGHUP at 0 to 400 ms after the scheduler is started through hold-signals, as the
             installed command starts: how many survive
  flood      four of the user's processes connect and hang up in a loop: root's gemsharectl
             status, a new pair of programs' handoffs, the scheduler's CPU (abuse_flood.py)
  mps_hang   --mps with a control program that hangs, and with one that answers: when status
             is first answered, programs started meanwhile (abuse_start.py)
  restart    a scheduler killed and started again: when its programs are back (abuse_start.py)

Environment: BENCH_JSON=path (write the results there), BENCH_QUICK=1 (tiny runs: checks that
the bench works, measures nothing worth publishing), BENCH_ONLY=part,part (those parts only),
GEMSHARE_BUILD_DIR (default <repo>/build).
bench/README.md says what each figure means.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import handoff  # noqa: E402
from abuse_flood import flood_part, suppressed  # noqa: E402
from abuse_start import mps_hang_part, restart_part  # noqa: E402
from abuser import ABUSER, ANSWER_WAIT, loop_result, looping, start_loop  # noqa: E402
from abuser import request as socket_request  # noqa: E402
from run_cpu import BUILD, built_results, title  # noqa: E402
from scheduler_process import SchedulerProcess, scheduler_command  # noqa: E402

CONTROL_HELD = 64  # the control connections the abuser opens: the cap before per-user shares
SERVING = "serving metrics on http://"


@dataclass
class Plan:
    flood_seconds: float
    handoff_seconds: float
    rules: tuple[int, ...]
    signal_delays_ms: tuple[float, ...]  # through hold-signals
    direct_signal_delays_ms: tuple[float, ...]  # straight, for comparison
    signal_repeats: dict[float, int]  # delays tried more than once: the first moments
    status_tries: int  # root's status requests in a row, beside a flood or a hung daemon
    restarts: int
    wait_for_kill: bool  # of the hung MPS control program (10 s and more)


FULL = Plan(5.0, 6.0, (1000, 2000, 4000), (0, 1, 2, 5, 10, *range(20, 401, 20)), (0, 10, 20, 30),
            {delay: 10 for delay in (0, 1, 2, 5, 10, 20, 30)}, 25, 5, True)
QUICK = Plan(0.5, 0.5, (100, 200), (0, 200), (0,), {}, 3, 1, False)


def metrics_address(scheduler: SchedulerProcess) -> tuple[str, int]:
    deadline = time.monotonic() + ANSWER_WAIT
    while SERVING not in (text := scheduler.log_path.read_text()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the scheduler never said where it serves metrics:\n{text}")
        time.sleep(0.02)
    host, port = text.split(SERVING, 1)[1].split("/", 1)[0].rsplit(":", 1)
    return host, int(port)


def request(scheduler: SchedulerProcess, body: dict, timeout: float = ANSWER_WAIT) -> dict:
    return socket_request(scheduler.socket, body, timeout)


# ----- parts ----------------------------------------------------------------------------------

def control_part(directory: Path) -> dict:
    scheduler = SchedulerProcess(directory)
    try:
        with looping("hold-control", scheduler.socket, CONTROL_HELD, 120) as (holder,):
            answered = json.loads(holder.stdout.readline())["answered"]
            status = request(scheduler, {"op": "status"})
            changed = request(scheduler, {"op": "set", "tq": 12})
    finally:
        scheduler.stop()
    return {"abuser_controls_answered": answered, "root_status_answered": status["ok"],
            "root_set_applied": changed["ok"], "root_error": status.get("error")}


def wait_idle(scheduler: SchedulerProcess) -> None:
    """Until the scheduler has served every connection but the one asking."""
    deadline = time.monotonic() + 60
    while request(scheduler, {"op": "status"}).get("status", {}).get("connections") != 1:
        if time.monotonic() > deadline:
            return
        time.sleep(0.1)


def logs_part(directory: Path, seconds: float) -> dict:
    """The user's three loops; then root's own lock loop, none of whose lines may be left
    out."""
    results = {}
    for name, uid, key in (("half-frames", ABUSER, "half_frames"),
                           ("register", ABUSER, "register"),
                           ("request-release", ABUSER, "request_release"),
                           ("request-release", 0, "root_request_release")):
        (directory / key).mkdir()
        scheduler = SchedulerProcess(directory / key)
        try:
            before = scheduler.log_path.stat().st_size
            done = loop_result(start_loop(name, scheduler.socket, seconds, uid=uid))
            wait_idle(scheduler)
            grown = scheduler.log_path.stat().st_size - before
        finally:
            scheduler.stop()
        results[f"{key}_log_kb_per_s"] = round(grown / 1024 / seconds, 1)
        results[f"{key}_loops"] = done.get("done", 0)
        if uid == 0:
            log = scheduler.log_path.read_text(errors="replace")
            results[f"{key}_grants_logged"] = log.count("INFO grant client")
            results[f"{key}_lines_suppressed"] = suppressed(log).get("uid 0", 0)
    return results


def scrape(host: str, port: int, timeout: float) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as reply:
            return reply.status == 200 and b"gemshare_" in reply.read()
    except OSError:
        return False


def metrics_part(directory: Path) -> dict:
    scheduler = SchedulerProcess(directory, args=("--metrics", "127.0.0.1:0"))
    results = {}
    try:
        host, port = metrics_address(scheduler)
        for slow in (8, 80):
            with looping("slow-http", host, port, slow, 60):
                time.sleep(1.5)  # connected, a byte or two sent each
                results[f"scrapes_answered_beside_{slow}_slow"] = sum(
                    scrape(host, port, timeout=2.0) for _ in range(3))
    finally:
        scheduler.stop()
    return results


def rules_file(path: Path, count: int) -> Path:
    path.write_text("tq = 30\n" + "".join(
        f'\n[[rule]]\nmatch = {{ label = "job-{n}", process = "train{n % 10}" }}\n'
        f"weight = {1 + n % 5}\n" for n in range(count)))
    return path


@contextlib.contextmanager
def reloading(scheduler: SchedulerProcess):
    """Reloads asked for one after another (as root) while the block runs."""
    stop = threading.Event()
    done = []

    def keep_reloading():
        while not stop.is_set():
            done.append(request(scheduler, {"op": "reload"}, timeout=120)["ok"])

    thread = threading.Thread(target=keep_reloading)
    thread.start()
    try:
        yield done
    finally:
        stop.set()
        thread.join(300)


def beside_slow_http(scheduler: SchedulerProcess):
    host, port = metrics_address(scheduler)
    return looping("slow-http", host, port, 80, 600)


def handoff_part(directory: Path, seconds: float, rules: int) -> dict:
    config = rules_file(directory / "rules.toml", rules)
    runs = {
        "alone": ((), contextlib.nullcontext),
        "slow_http": (("--metrics", "127.0.0.1:0"), beside_slow_http),
        "half_frames": ((), lambda s: looping("half-frames", s.socket, 600)),
        "status_loop": ((), lambda s: looping("status", s.socket, 600)),
        f"reload_{rules}_rules": (("--config", str(config)), reloading),
    }
    results = {}
    for name, (args, during) in runs.items():
        try:
            summary = handoff.measure(2, seconds, directory / name, args=args,
                                      during=during).summary()
        except RuntimeError as exc:  # e.g. the programs lost the scheduler: said, not measured
            results[f"handoff_failed_{name}"] = str(exc)[:1000]
            continue
        results[f"handoff_p50_us_{name}"] = summary["p50_us"]
        results[f"handoff_p99_us_{name}"] = summary["p99_us"]
        results[f"handoff_samples_{name}"] = summary["samples"]
    return results


def exit_seconds(process: subprocess.Popen, limit: float = 60.0) -> float | None:
    """Seconds until `process` exits after SIGTERM; None when it had not after `limit` (then it
    is killed)."""
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(limit)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return None
    return round(time.monotonic() - started, 3)


def timed_reload(scheduler: SchedulerProcess) -> float | None:
    started = time.monotonic()
    reply = request(scheduler, {"op": "reload"}, timeout=120)
    return round(time.monotonic() - started, 3) if reply["ok"] else None


def reload_part(directory: Path, counts: tuple[int, ...]) -> dict:
    results = {}
    for count in counts:
        where = directory / f"rules-{count}"
        where.mkdir()
        config = rules_file(where / "rules.toml", count)
        started = time.monotonic()
        scheduler = SchedulerProcess(where, args=("--config", str(config)), start_timeout=300)
        results[f"start_s_{count}_rules"] = round(time.monotonic() - started, 3)
        try:
            results[f"reload_s_{count}_rules"] = timed_reload(scheduler)
            if count == counts[-1]:
                asking = threading.Thread(target=timed_reload, args=(scheduler,))
                asking.start()
                time.sleep(0.1)  # the reload under way
                results[f"sigterm_during_reload_s_{count}_rules"] = exit_seconds(
                    scheduler.process)
                asking.join(300)
        finally:
            scheduler.stop()
    where = directory / "fifo"
    where.mkdir()
    config = rules_file(where / "rules.toml", 1)
    scheduler = SchedulerProcess(where, args=("--config", str(config)))
    try:
        config.unlink()
        os.mkfifo(config)
        started = time.monotonic()
        reply = request(scheduler, {"op": "reload"})
        results["fifo_reload_answer_s"] = round(time.monotonic() - started, 3) \
            if "error" in reply and "Timeout" not in reply["error"] else None
        results["fifo_sigterm_exit_s"] = exit_seconds(scheduler.process, ANSWER_WAIT)
    finally:
        scheduler.stop()
    return results


def state_part(directory: Path) -> dict:
    def nested(state: Path):
        (state / "settings.json").write_text('{"settings": ' + "[" * 100_000)

    def fifo(state: Path):
        os.mkfifo(state / "settings.json")

    def a_directory(state: Path):
        (state / "settings.json").mkdir()

    results = {}
    for make in (nested, fifo, a_directory):
        where = directory / f"state-{make.__name__}"
        state = where / "state"
        state.mkdir(parents=True)
        make(state)
        try:
            scheduler = SchedulerProcess(where, args=("--state-dir", str(state)),
                                         start_timeout=ANSWER_WAIT)
        except RuntimeError:
            results[f"state_{make.__name__}_starts"] = False
            continue
        try:
            kept = request(scheduler, {"op": "status"})["status"]["runtime_settings"]
            results[f"state_{make.__name__}_starts"] = True
            results[f"state_{make.__name__}_says_persistent"] = kept["persistent"]
        finally:
            scheduler.stop()
    return results


def signals_part(directory: Path, plan: Plan) -> dict:
    """SIGHUP at each delay after the scheduler's process is started: through hold-signals, as
    the installed command and make scheduler start it, and straight as `python -m`, as tests
    and the earlier bench did (the first moments tried `plan.signal_repeats` times). A delay of
    0 is sent as soon as Popen returns, while the exec may still be under way."""
    results = {}
    for name, launcher, delays in (("held", [str(BUILD / "hold-signals")],
                                    plan.signal_delays_ms),
                                   ("direct", [], plan.direct_signal_delays_ms)):
        trials, killed = 0, {}
        for delay in delays:
            for attempt in range(plan.signal_repeats.get(delay, 1)):
                where = directory / f"{name}-{delay}-{attempt}"
                where.mkdir()
                with open(where / "scheduler.log", "wb") as log:
                    process = subprocess.Popen(
                        [*launcher, *scheduler_command(where / "scheduler.sock")], stdout=log,
                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                time.sleep(delay / 1000)
                process.send_signal(signal.SIGHUP)
                deadline = time.monotonic() + 15
                while process.poll() is None and time.monotonic() < deadline and \
                        not (where / "scheduler.sock").exists():
                    time.sleep(0.02)
                trials += 1
                if process.poll() is not None:
                    killed[delay] = killed.get(delay, 0) + 1
                exit_seconds(process, ANSWER_WAIT)
        results.update({f"sighup_{name}_trials": trials,
                        f"sighup_{name}_survived": trials - sum(killed.values()),
                        f"sighup_{name}_killed_at_delay_ms":
                            {f"{delay:g}": count for delay, count in killed.items()}})
    return results


# ----- the run --------------------------------------------------------------------------------

def run(plan: Plan) -> dict:
    results = built_results(plan is QUICK, ("hold-signals",), abuser_uid=ABUSER)
    with tempfile.TemporaryDirectory(prefix="gs-abuse-", dir="/tmp") as scratch:
        directory = Path(scratch)
        os.chmod(directory, 0o755)  # the abuser reaches the sockets in it
        parts = {
            "control": lambda d: control_part(d),
            "logs": lambda d: logs_part(d, plan.flood_seconds),
            "metrics": lambda d: metrics_part(d),
            "handoff": lambda d: handoff_part(d, plan.handoff_seconds, plan.rules[-1]),
            "reload": lambda d: reload_part(d, plan.rules),
            "state": lambda d: state_part(d),
            "signals": lambda d: signals_part(d, plan),
            "flood": lambda d: flood_part(d, plan.status_tries, plan.handoff_seconds),
            "mps_hang": lambda d: mps_hang_part(d, plan.status_tries, plan.handoff_seconds,
                                                plan.wait_for_kill),
            "restart": lambda d: restart_part(d, plan.restarts),
        }
        only = os.environ.get("BENCH_ONLY")
        chosen = [name for name in parts if not only or name in only.split(",")]
        for name in chosen:
            part = parts[name]
            where = directory / name
            where.mkdir()
            os.chmod(where, 0o755)
            try:
                results[name] = part(where)
            except Exception as exc:  # recorded, and the other parts still run
                results[name] = {"error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
            print(f"{name}: {json.dumps(results[name])}", file=sys.stderr, flush=True)
    results["environment"]["loadavg_1min_after"] = os.getloadavg()[0]
    return results


def print_table(results: dict) -> None:
    print(title(f"bench-abuse | abuser uid {results['abuser_uid']}", results))
    for part in ("control", "logs", "metrics", "handoff", "reload", "state", "signals",
                 "flood", "mps_hang", "restart"):
        for key, value in results.get(part, {}).items():
            shown = value if key != "error" else value.splitlines()[0]
            print(f"  {part:<8} {key:<44} {shown}")


def main() -> int:
    plan = QUICK if os.environ.get("BENCH_QUICK", "") not in ("", "0") else FULL
    results = run(plan)
    if os.environ.get("BENCH_JSON"):
        Path(os.environ["BENCH_JSON"]).write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    failed = [part for part, found in results.items() if isinstance(found, dict) and
              "error" in found]
    if failed:
        print(f"bench-abuse: parts that failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
