"""Interleaved A/B runs: alternate two commands, read one number from each run, report medians.

Alternating (A B A B ...) rather than running all A then all B keeps slow drifts of the machine
(clocks, temperature, other tenants) from landing on one side only.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess


def run_json(command: list[str], env: dict | None = None, timeout: float = 600) -> dict:
    """Run a benchmark program and parse the JSON object on the last line of its output."""
    done = subprocess.run(command, env={**os.environ, **(env or {})}, capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def interleave(command: list[str], metric: str, rounds: int, env_a: dict, env_b: dict) -> dict:
    """Median of `metric` for the same command under two environments, and B/A."""
    samples_a, samples_b = [], []
    for _ in range(rounds):
        samples_a.append(run_json(command, env_a)[metric])
        samples_b.append(run_json(command, env_b)[metric])
    median_a, median_b = statistics.median(samples_a), statistics.median(samples_b)
    return {"metric": metric, "rounds": rounds, "median_a": median_a, "median_b": median_b,
            "ratio_b_over_a": median_b / median_a, "samples_a": samples_a,
            "samples_b": samples_b}
