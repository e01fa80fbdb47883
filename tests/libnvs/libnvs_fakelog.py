"""Reading the fake driver's event log (FAKECUDA_LOG).

Each line is "<monotonic ns> <pid> <tid> <event> key=value ...", appended by every process that
loads the fake libcuda.so.1; the clock is CLOCK_MONOTONIC, so times compare across processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# Queued work that occupies the simulated device (event records and markers do not).
WORK_OPS = frozenset({"kernel", "copy", "set", "prefetch", "host_fn", "free_async"})


@dataclass(frozen=True)
class Event:
    ns: int
    pid: int
    tid: int
    name: str
    fields: dict = field(hash=False, compare=False)

    def __getitem__(self, key: str) -> str:
        return self.fields[key]

    def get(self, key: str, default=None):
        return self.fields.get(key, default)


def parse_line(line: str) -> Event:
    head = line.split()
    if len(head) < 4:
        raise ValueError(f"not a fake driver log line: {line!r}")
    fields = {}
    for word in head[4:]:
        key, sep, value = word.partition("=")
        if sep:
            fields[key] = value
    return Event(int(head[0]), int(head[1]), int(head[2]), head[3], fields)


def read_events(path: Path) -> list[Event]:
    """Every event of the log, in timestamp order (lines of several processes interleave). A
    last line without its newline is one a process is writing as the log is read (a reader may
    see part of a write): it is left for a later read."""
    if not path.exists():
        return []
    complete = path.read_text().split("\n")[:-1]
    events = [parse_line(line) for line in complete if line.strip()]
    return sorted(events, key=lambda e: e.ns)


def named(events: list[Event], *names: str, pid: int | None = None) -> list[Event]:
    return [e for e in events if e.name in names and (pid is None or e.pid == pid)]


def exec_intervals(events: list[Event], pid: int, ops=WORK_OPS,
                   seqs: set[str] | None = None) -> list[tuple[int, int]]:
    """(begin ns, end ns) of each op of `pid` that the simulated device ran, in order; only of
    the submissions numbered `seqs`, when given."""
    begins = {}
    intervals = []
    for e in events:
        if e.pid != pid or e.get("op") not in ops or \
                (seqs is not None and e.get("seq") not in seqs):
            continue
        if e.name == "exec_begin":
            begins[e["seq"]] = e.ns
        elif e.name == "exec_end" and e["seq"] in begins:
            intervals.append((begins.pop(e["seq"]), e.ns))
    return intervals


def overlapping(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple]:
    """Pairs of intervals, one from each list, that overlap in time."""
    return [(x, y) for x in a for y in b if x[0] < y[1] and y[0] < x[1]]


def switches(events: list[Event], pids: set[int]) -> int:
    """How often the device changed from running one process's work to another's."""
    owners = [e.pid for e in events if e.name == "exec_begin" and e.pid in pids
              and e.get("op") in WORK_OPS]
    return sum(1 for x, y in zip(owners, owners[1:]) if x != y)


def prefetches(events: list[Event], pid: int, to_host: bool) -> list[Event]:
    """Submitted (not captured) prefetches of `pid` to the host (dst=-1) or to a device."""
    return [e for e in events if e.pid == pid and e.name.split("_pt")[0] == "prefetch"
            and "captured" not in e.fields and (e["dst"] == "-1") == to_host]


def prefetched(events: list[Event], pid: int, to_host: bool) -> list[tuple[int, int]]:
    """(address, bytes) of each of those prefetches, in order."""
    return [(int(e["ptr"], 16), int(e["size"])) for e in prefetches(events, pid, to_host)]


def move_intervals(events: list[Event], pid: int, to_host: bool,
                   moving: bool = False) -> list[tuple[int, int]]:
    """(begin ns, end ns) of each prefetch of `pid` to the host or to a device, as the simulated
    device ran it: when memory crossed the link. With `moving`, only those that moved bytes (a
    prefetch of pages already there is a no-op, however long a busy host makes it last)."""
    wanted = {e["seq"] for e in prefetches(events, pid, to_host) if "seq" in e.fields}
    if moving:
        wanted &= {e["seq"] for e in events if e.pid == pid and e.name == "exec_end"
                   and e.get("op") == "prefetch" and e.get("moved", "0") != "0"}
    return exec_intervals(events, pid, {"prefetch"}, wanted)


def discarded(events: list[Event], pid: int) -> list[tuple[int, int]]:
    """(address, bytes) of each range `pid` discarded, in order."""
    return [(int(e["ptr"], 16), int(e["size"])) for e in events
            if e.pid == pid and e.name.split("_pt")[0] == "discard" and "captured" not in e.fields]


def moves_out(events: list[Event], pid: int) -> list[Event]:
    """The submissions by which `pid` moved memory off its device, in order: prefetches to the
    host, and the discards that follow copies to staging memory."""
    return [e for e in events if e.pid == pid and "captured" not in e.fields
            and (e.name.split("_pt")[0] == "discard"
                 or e.name.split("_pt")[0] == "prefetch" and e["dst"] == "-1")]


# cuStreamCreate's flags for the streams libnvs moves memory on.
NON_BLOCKING = "1"


def library_streams(events: list[Event], pid: int) -> set[str]:
    """The non-blocking streams libnvs created in the process: on its own thread, where the
    stand-in's never runs."""
    return {e["stream"] for e in named(events, "stream_create", pid=pid)
            if e.tid != pid and e["flags"] == NON_BLOCKING}


def exec_ends(events: list[Event], pid: int) -> dict[str, int]:
    """When the simulated device finished each op of `pid`, by the seq its submission logged."""
    return {e["seq"]: e.ns for e in events if e.pid == pid and e.name == "exec_end"}


PAGE_SHIFT = 21  # the fake driver tracks where managed memory is in 2 MiB pages


def host_pages_at_kernels(events: list[Event], pid: int) -> list[int]:
    """For each kernel of `pid`, as the simulated device began it: how many 2 MiB pages its
    prefetches had left on the host (0: all of its moved memory was back on the device)."""
    submitted = {e["seq"]: e for e in prefetches(events, pid, True) + prefetches(events, pid, False)}
    on_host: set[int] = set()
    counts = []
    for e in events:
        if e.pid != pid:
            continue
        if e.name == "exec_end" and e.get("op") == "prefetch" and e["seq"] in submitted:
            move = submitted[e["seq"]]
            start = int(move["ptr"], 16) >> PAGE_SHIFT
            pages = range(start, start + (int(move["size"]) >> PAGE_SHIFT))
            if move["dst"] == "-1":
                on_host.update(pages)
            else:
                on_host.difference_update(pages)
        elif e.name == "exec_begin" and e.get("op") == "kernel":
            counts.append(len(on_host))
    return counts
