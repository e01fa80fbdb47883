"""bench-gpu part `beside_trainer`, the figures: what its programs printed read back, summed up
over rounds, set against the goals and printed. Pure functions, so that all of it is tested
without a GPU (tests/bench/test_bench_beside_trainer.py)."""

from __future__ import annotations

import json
import statistics

# What sharing the card must cost at most: a burst's median at most this many times its median
# alone, and the trainer at least this share of its steps per second alone.
BURST_RATIO_MAX = 1.3
TRAINER_SHARE_MIN = 0.75
ALONE = ("bursts_alone", "trainer_alone")
ROLES = ("trainer", "bursts")


def burst_records(text: str) -> list[dict]:
    """The bursts program's lines; a line cut short by a kill, or anything else, is passed over."""
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and {"start", "seconds"} <= record.keys():
            records.append(record)
    return records


def step_times(text: str) -> list[float]:
    """The trainer's lines: when each step's result was back."""
    times = []
    for line in text.splitlines():
        try:
            times.append(float(line))
        except ValueError:
            continue
    return times


def steps_per_s(steps: list[float], start: float, end: float) -> float | None:
    """Steps that ended inside (start, end], per second of it."""
    if end <= start:
        return None
    return sum(start < step <= end for step in steps) / (end - start)


def bursts_figures(records: list[dict], wanted: int) -> dict:
    seconds = [record["seconds"] for record in records]
    return {"bursts_s": seconds, "bursts_done": len(seconds), "bursts_wanted": wanted,
            "burst_median_s": statistics.median(seconds) if seconds else None,
            "burst_max_s": max(seconds, default=None)}


def together_figures(bursts_out: str, trainer_out: str, wanted: int, outlived: bool) -> dict:
    """The bursts, and the trainer's steps per second from the first burst's start to the last
    one's end: the time in which the two had to share the card."""
    records = burst_records(bursts_out)
    figures = bursts_figures(records, wanted)
    if records:
        start = records[0]["start"]
        end = max(record["start"] + record["seconds"] for record in records)
        figures.update(window_s=end - start,
                       trainer_its=steps_per_s(step_times(trainer_out), start, end))
    else:
        figures.update(window_s=None, trainer_its=None)
    return {**figures, "trainer_outlived_bursts": outlived}


def _median(values: list) -> float | None:
    values = [value for value in values if value is not None]
    return statistics.median(values) if values else None


def _lock(runs: list[dict]) -> dict | None:
    """Each role's count of each lock event, the median over the rounds."""
    locks = [run["lock"] for run in runs if "lock" in run]
    if not locks:
        return None
    return {role: {event: _median([lock[role][event] for lock in locks])
                   for event in locks[0][role]} for role in ROLES}


def _over_rounds(runs: list[dict]) -> dict:
    entry = {"rounds": len(runs),
             "trainer_its": _median([run.get("trainer_its") for run in runs])}
    if any("bursts_s" in run for run in runs):
        entry.update(
            burst_median_s=_median([run.get("burst_median_s") for run in runs]),
            burst_max_s=max((run["burst_max_s"] for run in runs
                             if run.get("burst_max_s") is not None), default=None),
            complete=all(run["bursts_done"] == run["bursts_wanted"] for run in runs))
    if any("trainer_outlived_bursts" in run for run in runs):
        entry["trainer_outlived_bursts"] = all(run["trainer_outlived_bursts"] for run in runs)
    if "scheduler" in runs[0]:
        entry.update(scheduler=runs[0]["scheduler"], lock=_lock(runs))
    return entry


def goals(entry: dict) -> dict:
    """Whether a shared run met each goal; None where its figure is missing. Bursts that did not
    all end, or a trainer that ended before them, miss the goal whatever the figures say."""
    ratio, share = entry.get("burst_ratio"), entry.get("trainer_share")
    return {"bursts": None if ratio is None else entry["complete"] and ratio <= BURST_RATIO_MAX,
            "trainer": None if share is None else
            entry["trainer_outlived_bursts"] and share >= TRAINER_SHARE_MIN}


def summary(rounds: list[dict[str, dict]]) -> dict:
    """Each run's figures over the rounds (medians; the worst burst of all), the ratios to the
    programs alone and, for the runs under gemshare, the goals."""
    names = list(dict.fromkeys(name for runs in rounds for name in runs))
    result = {}
    for name in names:
        runs = [runs[name] for runs in rounds if name in runs]
        good = [run for run in runs if "error" not in run]
        failed = len(runs) - len(good)
        result[name] = ({"error": next(run["error"] for run in runs), "failed_rounds": failed}
                        if not good else {**_over_rounds(good), "failed_rounds": failed})
    alone_burst = result.get("bursts_alone", {}).get("burst_median_s")
    alone_its = result.get("trainer_alone", {}).get("trainer_its")
    for name, entry in result.items():
        if name in ALONE or "error" in entry:
            continue
        burst, its = entry.get("burst_median_s"), entry.get("trainer_its")
        entry["burst_ratio"] = burst / alone_burst if burst is not None and alone_burst else None
        entry["trainer_share"] = its / alone_its if its is not None and alone_its else None
        if "scheduler" in entry:
            entry["goals"] = goals(entry)
    return result


# ----- printing ----------------------------------------------------------------------------


def _seconds(value) -> str:
    return "n/a" if value is None else f"{value:.3f} s"


def _rate(value) -> str:
    return "n/a" if value is None else f"{value:.1f} it/s"


def _events(role: str, counts: dict) -> str:
    return (f"{role} {counts['grants']:g} grants/{counts['drops']:g} drops/"
            f"{counts['revocations']:g} revocations/{counts['early_releases']:g} early releases")


def _goal(what: str, met) -> str:
    return f"{what} " + {True: "met", False: "MISSED", None: "n/a"}[met]


def label(name: str, entry: dict) -> str:
    scheduler = entry.get("scheduler")
    if not scheduler or not scheduler["args"]:
        return name
    return f"{name} [{' '.join(scheduler['args'])}]"


def together_line(entry: dict) -> str:
    """A run with both programs: its bursts, its trainer and, under gemshare, the lock."""
    line = f"burst median {_seconds(entry.get('burst_median_s'))}"
    if entry.get("burst_ratio") is not None:
        line += f" ({entry['burst_ratio']:.2f}x alone)"
    line += f", max {_seconds(entry.get('burst_max_s'))}"
    if not entry.get("complete", True):
        line += ", BURSTS NOT ALL DONE"
    line += f"; trainer {_rate(entry.get('trainer_its'))}"
    if entry.get("trainer_share") is not None:
        line += f" ({entry['trainer_share']:.0%} of alone)"
    if entry.get("trainer_outlived_bursts") is False:
        line += ", TRAINER ENDED FIRST"
    if entry.get("lock"):
        line += "; lock: " + ", ".join(_events(role, entry["lock"][role]) for role in ROLES)
    if "goals" in entry:
        line += (f"; goals: {_goal(f'bursts <= {BURST_RATIO_MAX}x', entry['goals']['bursts'])}, "
                 f"{_goal(f'trainer >= {TRAINER_SHARE_MIN:.0%}', entry['goals']['trainer'])}")
    return line


def entry_line(name: str, entry: dict) -> str:
    head = label(name, entry)
    if "error" in entry:
        lines = entry["error"].strip().splitlines()  # what failed, and the program's last word
        return f"{head}: FAILED ({' ... '.join(dict.fromkeys([lines[0], lines[-1]]))})"
    if "burst_median_s" not in entry:  # the trainer alone
        line = f"{head}: {_rate(entry['trainer_its'])}"
    elif "trainer_outlived_bursts" not in entry:  # the bursts alone
        line = (f"{head}: burst median {_seconds(entry['burst_median_s'])}, "
                f"max {_seconds(entry['burst_max_s'])}")
        if not entry.get("complete", True):
            line += ", BURSTS NOT ALL DONE"
    else:
        line = f"{head}: {together_line(entry)}"
    if entry.get("failed_rounds"):
        line += f" ({entry['failed_rounds']} of {entry['failed_rounds'] + entry['rounds']} " \
                "rounds failed)"
    return line


def run_line(name: str, run: dict) -> str:
    """One round's run, as it ends."""
    if "error" in run:
        return entry_line(name, run)
    # No ratios or goals yet: the runs alone of this round may not have ended well.
    return entry_line(name, _over_rounds([run])) + ("; TIMED OUT" if run.get("timed_out") else "")


def print_beside(part: dict) -> None:
    if "skipped" in part:
        print(f"beside_trainer: skipped ({part['skipped']})")
        return
    print(f"beside_trainer: {part['bursts']} bursts of {part['matmuls']} matmuls "
          f"{part['size']}^2, {part['gap_s']:g} s apart, beside a trainer of one such matmul "
          f"a step; TQ {part['tq']} s; {len(part['rounds'])} round(s), medians")
    for name, entry in part["summary"].items():
        print("  " + entry_line(name, entry))
