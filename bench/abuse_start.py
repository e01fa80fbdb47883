"""The start-up parts of make bench-abuse, each timed from the scheduler's exec:

  mps_hang  --mps with a control program that never answers (the stand-in of tests/fake_mps,
            FAKE_MPS_HANG=1), then with one that does: when the socket appears, when it says it
            listens, when a status request is first answered; status requests one after another
            from then; a pair of programs started as soon as the socket appears, whose handoffs
            are measured (a program that ran unscheduled says so, and the pair then measures
            nothing); when the hung control program was killed; when a healthy daemon answered.
  restart   two programs keep working while their scheduler is killed (SIGKILL) and started
            again, several times: from each start to its socket and to its line that it
            listens, and from the socket to both programs registered with it again.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import handoff
from abuser import request
from scheduler_process import scheduler_command

from gemshare_nvs.service.readiness import LISTENING, says_listening

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "libnvs"))
from libnvs_programs import FakeGpu  # noqa: E402

STAND_IN = REPO / "tests" / "fake_mps"
POLL_S = 0.002
REGISTERED_POLL_S = 0.02  # a status request each: not so often that they load the scheduler
WAIT_S = 60.0  # only a scheduler that hangs or dies takes so long
TRY_TIMEOUT_S = 1.0  # each status request of the first-answer poll
KILL_WAIT_S = 40.0  # the control program's timeout is 10 s, and a start makes up to three calls


class Started:
    """A scheduler process, with the moments of its start measured from its exec: by polling
    (its socket, the first answer) or by the time its log lines carry."""

    def __init__(self, directory: Path, args=(), env: dict | None = None):
        self.socket = directory / "scheduler.sock"
        self.log_path = directory / "scheduler.log"
        with open(self.log_path, "wb") as log:
            self.started, self.started_wall = time.monotonic(), time.time()
            self.process = subprocess.Popen(scheduler_command(self.socket, args),
                                            stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, env=env)
        self.socket_s = self.until(lambda: _accepts(self.socket))

    def since(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def until(self, condition, interval: float = POLL_S) -> float:
        """Seconds from the exec to when `condition()` first held, polled every `interval`."""
        deadline = time.monotonic() + WAIT_S
        while not condition():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the scheduler exited or hung while starting:\n"
                                   f"{self.log()[-3000:]}")
            time.sleep(interval)
        return self.since()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def logged_s(self, text: str) -> float | None:
        """Seconds from the exec to the first line that holds `text`, by the line's own time
        (milliseconds); None when there is none."""
        line = next((line for line in self.log().splitlines() if text in line), None)
        if line is None:
            return None
        stamp, millis = line[:23].rsplit(".", 1)
        wall = time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000
        return round(wall - self.started_wall, 3)

    def listening_s(self) -> float:
        self.until(lambda: says_listening(self.log(), self.socket))
        return self.logged_s(LISTENING + str(self.socket))

    def first_answer_s(self) -> float:
        return self.until(lambda: request(self.socket, {"op": "status"}, TRY_TIMEOUT_S)["ok"])

    def status(self) -> dict:
        return request(self.socket, {"op": "status"}).get("status", {})

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _accepts(path: Path) -> bool:
    """Whether a connection to `path` is taken (into the listen queue, at least): a socket
    file left by a killed scheduler refuses it, as one that is not there yet does."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.setblocking(False)
        try:
            probe.connect(str(path))
        except OSError:  # ENOENT, ECONNREFUSED; EAGAIN would be a full queue: taking none
            return False
    return True


def mps_env(**extra) -> dict:
    return {**os.environ, "PATH": f"{STAND_IN}:{os.environ['PATH']}", **extra}


def mps_hang_part(directory: Path, status_tries: int, pair_seconds: float,
                  wait_for_kill: bool) -> dict:
    hung = directory / "hung"
    hung.mkdir()
    # `on`: the pair takes turns, and each handoff is measured (MPS would put nobody through).
    scheduler = Started(hung, ("--mps", "--anti-thrash", "on"), mps_env(FAKE_MPS_HANG="1"))
    results = {"hung_socket_s": scheduler.socket_s}
    pair: dict = {}

    def run_pair():  # started at once, as programs waiting for the scheduler would be
        try:
            pair.update(handoff.measure_on(scheduler.socket, 2, pair_seconds,
                                           hung / "pair").summary())
        except RuntimeError as exc:  # a program warned: it ran unscheduled
            pair["failed"] = str(exc)[:1000]

    programs = threading.Thread(target=run_pair)
    programs.start()
    try:
        results["hung_first_status_s"] = scheduler.first_answer_s()
        results["hung_listening_s"] = scheduler.listening_s()
        answered = [request(scheduler.socket, {"op": "status"})["ok"]
                    for _ in range(status_tries)]
        results.update({"hung_status_tries": len(answered),
                        "hung_status_answered": sum(answered),
                        "hung_status_tries_done_s": scheduler.since()})
        programs.join()
        if "failed" in pair:
            results["hung_pair_failed"] = pair["failed"]
        else:
            results.update({"hung_pair_handoff_p50_us": pair["p50_us"],
                            "hung_pair_handoff_p99_us": pair["p99_us"],
                            "hung_pair_handoff_samples": pair["samples"]})
        if wait_for_kill:
            deadline = time.monotonic() + KILL_WAIT_S
            while "was killed" not in (scheduler.status().get("mps", {}).get("problem") or ""):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            else:
                results["hung_control_killed_s"] = scheduler.since()
    finally:
        programs.join()
        scheduler.stop()
    healthy = directory / "healthy"
    healthy.mkdir()
    scheduler = Started(healthy, ("--mps", "--anti-thrash", "auto"), mps_env())
    try:
        results["healthy_first_status_s"] = scheduler.first_answer_s()
        scheduler.until(lambda: scheduler.status().get("mps", {}).get("running"), 0.01)
        results["healthy_mps_running_s"] = scheduler.since()
    finally:
        scheduler.stop()
    return results


def registered(path: Path, pids: list[int]) -> bool:
    clients = {client["pid"] for client in request(path, {"op": "status"}, TRY_TIMEOUT_S)
               .get("status", {}).get("clients", [])}
    return set(pids) <= clients


def restart_part(directory: Path, restarts: int) -> dict:
    scheduler = Started(directory, ("--anti-thrash", "on"))
    gpu = FakeGpu(directory / "gpu", scheduler.socket)
    gpu.dir.mkdir()
    turn = ["launches", 4, 20, "sleep-ms", 20]
    starts, listening, rejoins = [], [], []
    try:
        programs = [gpu.start(["init", *turn * 20_000]) for _ in range(2)]
        pids = [program.pid for program in programs]
        scheduler.until(lambda: registered(scheduler.socket, pids), REGISTERED_POLL_S)
        for _ in range(restarts):
            scheduler.process.kill()  # a crash: the socket file stays behind
            scheduler.process.wait()
            scheduler = Started(directory, ("--anti-thrash", "on"))
            starts.append(scheduler.socket_s)
            listening.append(scheduler.listening_s())
            scheduler.until(lambda: registered(scheduler.socket, pids), REGISTERED_POLL_S)
            rejoins.append(max(scheduler.logged_s(f"(pid {pid}, ") for pid in pids) -
                           scheduler.socket_s)
    finally:
        gpu.stop_all()
        scheduler.stop()
    return {"restarts": restarts,
            "start_to_socket_s_median": round(statistics.median(starts), 3),
            "start_to_listening_s_median": round(statistics.median(listening), 3),
            "rejoin_after_socket_s_median": round(statistics.median(rejoins), 3),
            "rejoin_after_socket_s_max": round(max(rejoins), 3)}
