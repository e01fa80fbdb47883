"""make bench-cpu: the fake driver through the real scheduler and libnvs.so; prints a table,
writes JSON.

Four measurements (bench/README.md says what each number means):
  handoff.py          lock handoff latency with 2, 8 and 64 programs taking turns;
  hook_cost.py        what libnvs.so adds to one launch while holding the lock (interleaved A/B);
  scheduler_scale.py  1,000 connected clients: grants per second, the scheduler's memory;
  gap_pair.py         an oversubscribed pair with idle gaps: together against one after another;
  notebooks_fake.py   four mostly idle programs whose memory does not fit together: their cells.

Environment: BENCH_JSON=path (write the results there), BENCH_QUICK=1 (tiny sample counts: checks
that the bench works, measures nothing worth publishing), BENCH_ROUNDS (A/B rounds of the launch
cost, default 31), GEMSHARE_BUILD_DIR (default <repo>/build).
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gap_pair  # noqa: E402
import handoff  # noqa: E402
import hook_cost  # noqa: E402
import notebooks_fake  # noqa: E402
import scheduler_scale  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("GEMSHARE_BUILD_DIR") or REPO / "build").resolve()
HANDOFF_CLIENTS = (2, 8, 64)
SCALE_CLIENTS = 1000
TARGETS = {"handoff_p99_us": 1000.0, "hook_launch_overhead_ns": 50.0}


@dataclass
class Plan:
    handoff_seconds: dict[int, float]  # clients -> measured seconds
    rounds: int
    launches: dict[str, int]  # launch_cost mode -> launches per run
    scale_seconds: float
    gap_pair_passes: int
    notebook_setups: dict[str, notebooks_fake.Notebooks]


# Many short A/B runs rather than a few long ones: a disturbance from outside (another process
# taking a CPU for a while) then spoils single runs, which the medians ignore.
FULL = Plan({2: 15, 8: 8, 64: 10}, 31, {"queued": 100_000, "rejected": 2_000_000}, 5, 8,
            notebooks_fake.SETUPS)
QUICK = Plan({2: 0.5, 8: 0.5, 64: 0.5}, 3, {"queued": 20_000, "rejected": 200_000}, 0.5, 2,
             {"standard": notebooks_fake.Notebooks(cells=2)})


def output_of(command: list[str]) -> str:
    """A tool's output for the record, or "" where the tool is missing."""
    try:
        return subprocess.run(command, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def environment() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in output_of(["lscpu"]).splitlines()
                  if line.startswith("Model name")), "")
    revision = output_of(["git", "-C", str(REPO), "describe", "--always", "--dirty"])
    return {"cpus": len(os.sched_getaffinity(0)), "cpu_model": model,
            "kernel": platform.release(), "python": platform.python_version(),
            "revision": revision or "unknown", "date": date.today().isoformat(),
            # Other work on the machine shows in the tails: keep a record of how busy it was.
            "loadavg_1min_before": os.getloadavg()[0]}


def built_results(quick: bool, targets: tuple[str, ...] = (), **first) -> dict:
    """Builds the library, the fake driver and any other make `targets` as needed; the results
    a fake-driver bench starts from: the machine, whether the run is a quick one, and `first`."""
    subprocess.run(["make", "-s", "-C", str(REPO), "lib", "fakecuda", *targets,
                    f"BUILD={BUILD}"], check=True)
    return {"environment": environment(), "quick": quick, **first}


def run(plan: Plan, rounds: int) -> dict:
    results = built_results(plan is QUICK)
    details: dict = {}
    with tempfile.TemporaryDirectory(prefix="gs-bench-", dir="/tmp") as scratch:
        directory = Path(scratch)
        for clients in HANDOFF_CLIENTS:
            summary = handoff.measure(clients, plan.handoff_seconds[clients],
                                      directory / f"handoff-{clients}").summary()
            details[f"handoff_{clients}"] = summary
            prefix = "handoff" if clients == 2 else f"handoff_{clients}"
            results[f"{prefix}_p50_us"] = summary["p50_us"]
            results[f"{prefix}_p99_us"] = summary["p99_us"]
            results[f"{prefix}_samples"] = summary["samples"]
        costs = hook_cost.measure(BUILD, directory / "hook", rounds, plan.launches)
        details["launch_cost"] = costs
        results["hook_launch_overhead_ns"] = costs["rejected"]["overhead_ns"]
        results["hook_launch_ns_plain"] = costs["rejected"]["median_a"]
        results["hook_launch_ns_libnvs"] = costs["rejected"]["median_b"]
        results["hook_queued_launch_overhead_ns"] = costs["queued"]["overhead_ns"]
        scale = scheduler_scale.measure(SCALE_CLIENTS, plan.scale_seconds, directory / "scale")
        details["scale"] = scale
        results["scale_clients"] = scale["clients"]
        results["scale_grants_per_s"] = scale["grants_per_s"]
        results["scale_rss_mib"] = scale["rss_connected_mib"]
        results["scale_rss_idle_mib"] = scale["rss_idle_mib"]
        gaps = gap_pair.measure(directory / "gap-pair", plan.gap_pair_passes)
        details["gap_pair"] = gaps
        for name in gap_pair.RATES_GBPS:
            results[f"gap_pair_ratio_{name}"] = gaps[name]["ratio"]
        for name, setup in plan.notebook_setups.items():
            cells = notebooks_fake.measure(directory / f"notebooks-{name}", setup)
            details[f"notebooks_{name}"] = cells
            for mode in ("alone", "on", "auto"):
                for figure in ("cell_median_s", "cell_max_s"):
                    results[f"notebooks_{name}_{mode}_{figure}"] = cells[mode][figure]
    results["details"] = details
    results["environment"]["loadavg_1min_after"] = os.getloadavg()[0]
    return results


def verdict(key: str, value: float) -> str:
    target = TARGETS.get(key)
    if target is None:
        return ""
    return f"target < {target:g}: " + ("met" if value < target else "MISSED")


def title(bench: str, results: dict) -> str:
    """A bench's first line: what ran, where, on which code, how busy the machine was."""
    env = results["environment"]
    quick = " | QUICK MODE: not for publishing" if results["quick"] else ""
    return (f"\n{bench} | {env['cpus']} CPUs, {env['cpu_model']} | Linux {env['kernel']} | "
            f"Python {env['python']} | {env['revision']} | {env['date']} | load "
            f"{env['loadavg_1min_before']:.2f} -> {env['loadavg_1min_after']:.2f}{quick}")


def print_table(results: dict) -> None:
    print(title("bench-cpu", results))
    details = results["details"]
    print(f"{'lock handoff (release -> next launch)':<40}{'p50 us':>10}{'p90 us':>10}"
          f"{'p99 us':>10}{'max us':>10}{'samples':>9}")
    for clients in HANDOFF_CLIENTS:
        row = details[f"handoff_{clients}"]
        label = f"  {clients} clients"
        print(f"{label:<40}{row['p50_us']:>10.0f}{row['p90_us']:>10.0f}{row['p99_us']:>10.0f}"
              f"{row['max_us']:>10.0f}{row['samples']:>9}"
              + ("   " + verdict("handoff_p99_us", row["p99_us"]) if clients == 2 else ""))
    print(f"{'launch through libnvs.so (ns/launch)':<40}{'plain':>10}{'libnvs':>10}"
          f"{'added':>10}{'rounds':>9}")
    for mode, label in (("rejected", "  launch the driver refuses at once"),
                        ("queued", "  launch the fake queues (noisy)")):
        row = details["launch_cost"][mode]
        print(f"{label:<40}{row['median_a']:>10.1f}{row['median_b']:>10.1f}"
              f"{row['overhead_ns']:>10.1f}{row['rounds']:>9}"
              + ("   " + verdict("hook_launch_overhead_ns", row["overhead_ns"])
                 if mode == "rejected" else ""))
    scale = details["scale"]
    print(f"scheduler with {scale['clients']} clients: {scale['grants_per_s']:.0f} grants/s "
          f"(scheduler: {scale['scheduler_cpu_share']:.0%} of a CPU, "
          f"{scale['scheduler_cpu_us_per_grant']:.0f} us CPU per grant), "
          f"VmRSS {scale['rss_idle_mib']:.1f} MiB idle -> {scale['rss_connected_mib']:.1f} MiB "
          f"connected ({scale['rss_peak_mib']:.1f} MiB peak), registered in "
          f"{scale['register_s']:.2f} s")
    gap_pair.print_gap_pair(details["gap_pair"])
    for key, cells in details.items():
        if key.startswith("notebooks_"):
            notebooks_fake.print_notebooks(key.removeprefix("notebooks_"), cells)


def main() -> int:
    plan = QUICK if os.environ.get("BENCH_QUICK", "") not in ("", "0") else FULL
    text = os.environ.get("BENCH_ROUNDS") or str(plan.rounds)
    if not text.isdigit() or int(text) < 1:
        print(f"bench-cpu: BENCH_ROUNDS must be a whole number of at least 1, not {text!r}",
              file=sys.stderr)
        return 2
    rounds = int(text)
    results = run(plan, rounds)
    bad = [key for key, value in results.items()
           if isinstance(value, float) and not math.isfinite(value)]
    if os.environ.get("BENCH_JSON"):
        Path(os.environ["BENCH_JSON"]).write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    if bad:
        print(f"bench-cpu: no measurement for {', '.join(bad)} (too few samples?)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
