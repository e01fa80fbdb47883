"""`make bench-soak` still works: its quick mode runs the soak for real (seconds) and writes one
JSON object with every published key. Speed and memory are never asserted; that the scheduler
came through (no failed program, fuzz or control request, no client left) is behaviour."""

from __future__ import annotations

import math

from quick_bench import run_quick

MEASURED = [f"soak_rss_{when}_mib" for when in ("start", "end", "peak")] + \
    [f"soak_fds_{when}" for when in ("start", "end", "peak")] + \
    [f"soak_handoff_{q}_{when}_us" for q in ("p50", "p99") for when in ("start", "end")]
COUNTED = ["soak_programs_started", "soak_programs_killed", "soak_program_failures",
           "soak_program_warnings", "soak_fuzz_connections", "soak_fuzz_frames",
           "soak_fuzz_failures", "soak_control_requests", "soak_control_failures",
           "soak_clients_left", "soak_handoff_samples_start", "soak_handoff_samples_end"]


def test_quick_bench_soak_writes_every_key(tmp_path):
    done, results = run_quick("soak.py", tmp_path / "soak.json")
    for key in MEASURED:
        assert key in results, f"{key} missing from {sorted(results)}"
        assert isinstance(results[key], (int, float)) and math.isfinite(results[key]) and \
            results[key] > 0, (key, results[key])
    for key in COUNTED:
        assert isinstance(results.get(key), int), (key, results.get(key))
    for key in ("soak_programs_started", "soak_fuzz_connections", "soak_control_requests",
                "soak_handoff_samples_start", "soak_handoff_samples_end"):
        assert results[key] > 0, (key, results[key])
    for key in ("soak_program_failures", "soak_fuzz_failures", "soak_control_failures",
                "soak_clients_left"):
        assert results[key] == 0, (key, results["details"]["problems"])
    assert results["soak_scheduler_tracebacks"] is False
    assert results["quick"] is True and results["soak_seconds"] > 0
    assert results["details"]["timeline"], results["details"]
    assert "QUICK MODE" in done.stdout and "scheduler VmRSS" in done.stdout
