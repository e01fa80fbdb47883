"""`make bench-abuse` still works: its quick mode runs every part for real (tiny runs) and writes
one JSON object with every published key. Nothing about speed or sizes is asserted."""

from __future__ import annotations

import math

from quick_bench import run_quick

KEYS = {
    "control": ["abuser_controls_answered", "root_status_answered", "root_set_applied"],
    "logs": [f"{loop}_{what}" for loop in ("half_frames", "register", "request_release")
             for what in ("log_kb_per_s", "loops")],
    "metrics": ["scrapes_answered_beside_8_slow", "scrapes_answered_beside_80_slow"],
    "handoff": [f"handoff_{what}_{run}" for run in ("alone", "slow_http", "half_frames",
                                                      "status_loop", "reload_200_rules")
                for what in ("p50_us", "p99_us", "samples")],
    "reload": ["start_s_100_rules", "reload_s_100_rules", "start_s_200_rules",
               "reload_s_200_rules", "sigterm_during_reload_s_200_rules",
               "fifo_reload_answer_s", "fifo_sigterm_exit_s"],
    "state": [f"state_{kind}_starts" for kind in ("nested", "fifo", "a_directory")],
    "signals": ["sighup_trials", "sighup_survived", "sighup_delays_ms_killed"],
}


def test_quick_bench_abuse_writes_every_key(tmp_path):
    done, results = run_quick("abuse.py", tmp_path / "abuse.json")
    assert results["quick"] is True
    for part, keys in KEYS.items():
        for key in keys:
            assert key in results[part], f"{part}.{key} missing from {sorted(results[part])}"
    for key in ("half_frames_loops", "register_loops", "request_release_loops"):
        assert results["logs"][key] > 0, results["logs"]  # the loops ran
    for run in ("alone", "slow_http", "half_frames", "status_loop", "reload_200_rules"):
        p50, p99 = (results["handoff"][f"handoff_{q}_us_{run}"] for q in ("p50", "p99"))
        assert math.isfinite(p50) and 0 < p50 <= p99, (run, p50, p99)
    assert results["signals"]["sighup_trials"] == 2
    assert "QUICK MODE" in done.stdout and "bench-abuse" in done.stdout
