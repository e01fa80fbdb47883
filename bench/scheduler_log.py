"""Counting the lock's events in a scheduler's log: grants, drops, revocations, early releases.

The lines are the policy core's (`grant client 3 (pid 10, python3): device 0 ...`), so counts can
be had for the whole log or for the clients of one process id.
"""

from __future__ import annotations

import re

LINE = re.compile(r"\b(grant|drop|revoke|release) client \d+ \(pid (\d+),([^\n]*)")
EVENTS = {"grant": "grants", "drop": "drops", "revoke": "revocations"}
EARLY = "early (idle)"  # the only releases counted: those not asked for by a drop


def lock_events(log: str, pid: int | None = None) -> dict[str, int]:
    """How many of each event the log holds, for every client or for those of process `pid`."""
    counts = dict.fromkeys([*EVENTS.values(), "early_releases"], 0)
    for word, client_pid, rest in LINE.findall(log):
        if pid is not None and int(client_pid) != pid:
            continue
        if word in EVENTS:
            counts[EVENTS[word]] += 1
        elif EARLY in rest:
            counts["early_releases"] += 1
    return counts
