"""Programs of two kinds driven against the policy core on its fake clock, for the share tests.

A busy program always has work: it asks for the lock whenever it does not hold it, and answers a
drop at once. A bursty program works `burst` seconds, then sleeps `sleep` seconds without the
GPU; holding the lock when its burst is done, it releases early after `idle` seconds, as libnvs
does. Each records how long it waited for each grant and how long it held the lock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from policy_driver import Driver

from gemshare_nvs import protocol as p


@dataclass
class Program:
    cid: int
    burst: float | None = None  # None: busy
    sleep: float = 0.0
    idle: float = 0.25
    holding: bool = False
    asked_at: float | None = None
    granted_at: float = 0.0
    left: float = 0.0  # seconds of the current burst still to run
    wakes_at: float = 0.0  # when a sleeping bursty program has work again
    releases_at: float = math.inf  # early release of a holder whose burst is done
    waits: list[float] = field(default_factory=list)
    held: float = 0.0
    bursts: list[float] = field(default_factory=list)  # wall time of each finished burst
    burst_started: float | None = None

    @property
    def busy(self) -> bool:
        return self.burst is None


class Simulation:
    def __init__(self, driver: Driver, programs: list[Program] = ()):
        self.driver = driver
        self.programs: dict[int, Program] = {}
        self.drops = 0
        for program in programs:
            self.add(program)

    def add(self, program: Program, terms: dict | None = None, node=None) -> None:
        """Register a program (with gemsharectl's `terms` for it, if given, and the container
        the node gives, `node`) and start it."""
        self.programs[program.cid] = program
        self.driver.register(program.cid, node=node)
        if terms:
            self.driver.policy.override(4000 + program.cid, terms, self.driver.now)
        self._start_burst(program)

    def _start_burst(self, program: Program) -> None:
        program.left = program.burst or math.inf
        program.burst_started = self.driver.now
        self._ask(program)

    def _ask(self, program: Program) -> None:
        program.asked_at = self.driver.now
        self._handle(self.driver.request(program.cid))

    def _release(self, program: Program, reason: int) -> None:
        self._stop_running(program)
        program.holding = False
        program.releases_at = math.inf
        self._handle(self.driver.release(program.cid, reason=reason))

    def _stop_running(self, program: Program) -> None:
        now = self.driver.now
        ran = now - program.granted_at
        program.held += ran
        if not program.busy and program.left > 0:
            program.left = max(program.left - ran, 0.0)
        program.granted_at = now

    def _handle(self, actions: list) -> None:
        sent, self.driver.sent = self.driver.sent, []
        for cid, message in sent:
            program = self.programs[cid]
            if isinstance(message, p.LockGranted):
                program.holding, program.granted_at = True, self.driver.now
                program.waits.append(self.driver.now - program.asked_at)
                program.asked_at = None
                if not program.busy and program.left == 0:  # nothing to do: release early
                    program.releases_at = self.driver.now + program.idle
            elif isinstance(message, p.DropLock):
                self.drops += 1
                self._release(program, p.ReleaseReason.DROPPED)
                if program.busy or program.left > 0:
                    self._ask(program)

    def _next_event(self) -> float:
        times = [self.driver.policy.next_deadline() or math.inf]
        for program in self.programs.values():
            if program.holding and not program.busy and program.left > 0:
                times.append(program.granted_at + program.left)  # burst done
            times.append(program.releases_at)
            if not program.busy and program.asked_at is None and program.left == 0:
                times.append(program.wakes_at)
        return min(times)

    def run(self, seconds: float) -> None:
        end = self.driver.now + seconds
        while True:
            at = max(min(self._next_event(), end), self.driver.now)
            self._handle(self.driver.advance(at - self.driver.now))
            now = self.driver.now
            for program in self.programs.values():
                if program.holding and not program.busy and program.left > 0 and \
                        now >= program.granted_at + program.left:
                    self._stop_running(program)
                    program.left = 0.0
                    program.bursts.append(now - program.burst_started)
                    program.wakes_at = now + program.sleep
                    program.releases_at = now + program.idle
                if program.holding and not program.busy and program.left == 0 and \
                        now >= program.wakes_at:  # work again before its early release
                    self._stop_running(program)
                    program.left, program.burst_started = program.burst, now
                    program.releases_at = math.inf
                if program.holding and now >= program.releases_at:
                    self._release(program, p.ReleaseReason.IDLE)
                if not program.busy and not program.holding and program.asked_at is None \
                        and program.left == 0 and now >= program.wakes_at:
                    self._start_burst(program)
            if now >= end:
                break
        for program in self.programs.values():  # count the running holds up to the end
            if program.holding:
                self._stop_running(program)
