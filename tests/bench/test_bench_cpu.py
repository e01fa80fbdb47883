"""`make bench-cpu` still works: its quick mode runs every measurement for real (tiny samples) and
writes one JSON object with every published key and sane values. Speed is never asserted."""

from __future__ import annotations

import math

from quick_bench import run_quick

HANDOFF_KEYS = [f"{prefix}_{what}" for prefix in ("handoff", "handoff_8", "handoff_64")
                for what in ("p50_us", "p99_us", "samples")]
# Differences of two medians: noise may make them negative in a quick run, never infinite.
DIFFERENCES = ["hook_launch_overhead_ns", "hook_queued_launch_overhead_ns"]
GAP_PAIR_KEYS = [f"gap_pair_ratio_{name}" for name in ("fast", "tight", "slow")]
NOTEBOOK_KEYS = [f"notebooks_standard_{mode}_{figure}" for mode in ("alone", "on", "auto")
                 for figure in ("cell_median_s", "cell_max_s")]
POSITIVE = HANDOFF_KEYS + GAP_PAIR_KEYS + NOTEBOOK_KEYS + [
    "hook_launch_ns_plain", "hook_launch_ns_libnvs", "scale_grants_per_s", "scale_rss_mib",
    "scale_rss_idle_mib"]


def test_quick_bench_cpu_writes_every_key(tmp_path):
    done, results = run_quick("run_cpu.py", tmp_path / "bench.json")
    for key in POSITIVE + DIFFERENCES:
        assert key in results, f"{key} missing from {sorted(results)}"
        assert isinstance(results[key], (int, float)) and math.isfinite(results[key]), \
            (key, results[key])
    for key in POSITIVE:
        assert results[key] > 0, (key, results[key])
    assert results["scale_clients"] == 1000
    assert results["quick"] is True
    # First come first served over one queue: no client got a second grant before every
    # client ahead of it got one, so grants per client differ by at most one.
    scale = results["details"]["scale"]
    assert scale["grants_per_client_max"] - scale["grants_per_client_min"] <= 1, scale
    # Handoff latencies are ordered as percentiles must be.
    for clients in (2, 8, 64):
        row = results["details"][f"handoff_{clients}"]
        assert 0 < row["p50_us"] <= row["p90_us"] <= row["p99_us"] <= row["max_us"], row
    # The pair with idle gaps ran each way, every program to its end.
    gaps = results["details"]["gap_pair"]
    assert gaps["passes"] == 2 and gaps["one_after_another_s"] > 2 * 2 * (0.25 + 1.0)
    for name in ("fast", "tight", "slow"):
        assert gaps[name]["grants"] >= 2 and gaps[name]["seconds"] > 2 * (0.25 + 1.0), gaps
    # Every notebook ran its cells, under each mode and alone, and took its turns.
    notebooks = results["details"]["notebooks_standard"]
    for mode in ("alone", "on", "auto"):
        assert len(notebooks[mode]["per_program"]) == 4, notebooks[mode]
    assert notebooks["on"]["grants"] >= 4 * 2
    assert "QUICK MODE" in done.stdout and "lock handoff" in done.stdout
    assert "oversubscribed pair with idle gaps" in done.stdout and "notebooks, standard" in done.stdout
