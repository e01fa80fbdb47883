"""`make bench-abuse` still works: its quick mode runs every part for real (tiny runs) and writes
one JSON object with every published key. Nothing about speed or sizes is asserted."""

from __future__ import annotations

import math

from quick_bench import run_quick

KEYS = {
    "control": ["abuser_controls_answered", "root_status_answered", "root_set_applied"],
    "logs": [f"{loop}_{what}" for loop in ("half_frames", "register", "request_release",
                                            "root_request_release")
             for what in ("log_kb_per_s", "loops")] +
            ["root_request_release_grants_logged", "root_request_release_lines_suppressed"],
    "metrics": ["scrapes_answered_beside_8_slow", "scrapes_answered_beside_80_slow"],
    "handoff": [f"handoff_{what}_{run}" for run in ("alone", "slow_http", "half_frames",
                                                      "status_loop", "reload_200_rules")
                for what in ("p50_us", "p99_us", "samples")],
    "reload": ["start_s_100_rules", "reload_s_100_rules", "start_s_200_rules",
               "reload_s_200_rules", "sigterm_during_reload_s_200_rules",
               "fifo_reload_answer_s", "fifo_sigterm_exit_s"],
    "state": [f"state_{kind}_starts" for kind in ("nested", "fifo", "a_directory")],
    "signals": [f"sighup_{how}_{what}" for how in ("held", "direct")
                for what in ("trials", "survived", "killed_at_delay_ms")],
    "flood": [f"{asked}_{what}" for asked in ("ctl_status", "round_trip")
              for what in ("tries", "answered", "answered_in_a_row", "median_s", "max_s")] +
             ["scheduler_cpu_percent", "flood_connects_per_s", "flood_connects_failed",
              "closed_over_rate", "root_lines_suppressed"],
    "mps_hang": ["hung_socket_s", "hung_first_status_s", "hung_listening_s", "hung_status_tries",
                 "hung_status_answered", "healthy_first_status_s",
                 "healthy_mps_running_s"],
    "restart": ["restarts", "start_to_socket_s_median", "start_to_listening_s_median",
                "rejoin_after_socket_s_median", "rejoin_after_socket_s_max"],
}


def test_quick_bench_abuse_writes_every_key(tmp_path):
    done, results = run_quick("abuse.py", tmp_path / "abuse.json")
    assert results["quick"] is True
    for part, keys in KEYS.items():
        for key in keys:
            assert key in results[part], f"{part}.{key} missing from {sorted(results[part])}"
    for key in ("half_frames_loops", "register_loops", "request_release_loops",
                "root_request_release_loops"):
        assert results["logs"][key] > 0, results["logs"]  # the loops ran
    for run in ("alone", "slow_http", "half_frames", "status_loop", "reload_200_rules"):
        p50, p99 = (results["handoff"][f"handoff_{q}_us_{run}"] for q in ("p50", "p99"))
        assert math.isfinite(p50) and 0 < p50 <= p99, (run, p50, p99)
    assert (results["signals"]["sighup_held_trials"],
            results["signals"]["sighup_direct_trials"]) == (2, 1)
    assert results["flood"]["ctl_status_tries"] == results["mps_hang"]["hung_status_tries"] == 3
    # A pair of programs is measured, or why not is said (on a busy machine a flood may keep
    # its registration waiting past the library's timeout).
    assert "pair_handoff_p99_us" in results["flood"] or "pair_failed" in results["flood"]
    assert "hung_pair_handoff_p99_us" in results["mps_hang"] or \
        "hung_pair_failed" in results["mps_hang"]
    assert "QUICK MODE" in done.stdout and "bench-abuse" in done.stdout
