"""Counting the lock's events in a scheduler's log: grants, drops, revocations, early releases;
how long clients took to answer the scheduler's EVICTs, and each one's first move out.

The lines are the policy core's (`grant client 3 (pid 10, python3): device 0 ...`), so counts can
be had for the whole log or for the clients of one process id.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

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


# The time of day that starts each line, and its level.
STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) [A-Z]+ "
# The EVICT and its answer (MOVED to the host).
STAMPED = re.compile(STAMP + r"(evict|moved) client (\d+) ([^\n]*)", re.MULTILINE)


def stamped_at(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f")


def eviction_answers(log: str) -> list[float]:
    """Seconds from each EVICT to the client's MOVED to the host, in the log's order. A move's own
    time leaves out what libnvs waited for before it (staging memory): this does not."""
    asked: dict[str, datetime] = {}
    answers = []
    for stamp, word, client, rest in STAMPED.findall(log):
        at = stamped_at(stamp)
        if word == "evict":
            asked.setdefault(client, at)
        elif "to the host" in rest and client in asked:
            answers.append((at - asked.pop(client)).total_seconds())
    return answers


# A move's report: when the line was written, the client's process, the bytes and the seconds.
MOVED_OUT = re.compile(STAMP + r"moved client \d+ \(pid (\d+),[^\n]*?: device \d+, (\d+) bytes "
                       r"to the host in ([\d.]+) s", re.MULTILINE)


def first_moves_out(log: str, least_bytes: int) -> dict[int, tuple[datetime, int, float]]:
    """Process id -> (when it began, bytes, seconds) of the first move to the host of at least
    `least_bytes` that each client's process made: a smaller one takes milliseconds whatever
    its rate."""
    first: dict[int, tuple[datetime, int, float]] = {}
    for stamp, pid, size, seconds in MOVED_OUT.findall(log):
        if int(size) >= least_bytes and int(pid) not in first:
            began = stamped_at(stamp) - timedelta(seconds=float(seconds))
            first[int(pid)] = (began, int(size), float(seconds))
    return first


GRANT = re.compile(r"\bgrant client (\d+) ")
MOVED_BYTES = re.compile(r"\bmoved client (\d+) .*?: device \d+, (\d+) bytes to the (host|device)")


def switch_moves(log: str, warm_up: int = 2) -> list[int]:
    """Bytes moved (out and in) by each switch from one client to another, in order: a switch
    runs from a grant to a client other than the last one granted up to the next such grant.
    From the first switch after `warm_up` clients have each moved memory out once: their first
    move out may carry memory that stays on the host afterwards (libnvs's cold memory)."""
    switches: list[int] = []
    last, out_once, counting = None, set(), False
    for line in log.splitlines():
        if (grant := GRANT.search(line)) and grant[1] != last:
            last = grant[1]
            counting = counting or len(out_once) >= warm_up
            if counting:
                switches.append(0)
        elif moved := MOVED_BYTES.search(line):
            if moved[3] == "host":
                out_once.add(moved[1])
            if counting and switches:
                switches[-1] += int(moved[2])
    return switches
