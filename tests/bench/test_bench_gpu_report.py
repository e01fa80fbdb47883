"""`make bench-gpu`'s parts that need no GPU: choosing parts with BENCH_ONLY and printing the
table from whatever parts ran, so the GPU bench cannot rot unnoticed between GPU runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import run_gpu  # noqa: E402

ENVIRONMENT = {"gpu": "Test GPU, 580.0, 81559 MiB, 0 MiB", "torch": "2.11.0", "torch_cuda": "13.0",
               "date": "2026-11-22"}
AB = {"metric": "launches_per_s", "rounds": 3, "median_a": 250000.0, "median_b": 245000.0,
      "ratio_b_over_a": 0.98, "samples_a": [], "samples_b": []}
SWAP = {"fault_h2d_gbps": 8.8, "prefetch_h2d_gbps": 48.3, "prefetch_d2h_gbps": 10.3,
        "pinned_h2d_gbps": 54.2, "on_grant_gbps": 31.3, "on_grant_swap_gbps": None,
        "on_grant_seconds": 0.137, "on_grant_hot_seconds": 0.049, "on_grant_gbps_overlap": 31.9,
        "on_grant_swap_gbps_overlap": 54.0}


def table(results: dict, capsys) -> str:
    run_gpu.print_table({"environment": ENVIRONMENT, **results})
    return capsys.readouterr().out


def test_every_part_prints(capsys):
    out = table({"launch_rate": AB, "train_steps": {**AB, "metric": "steps_per_s",
                                                    "median_a": 134.0, "median_b": 133.0},
                 "swapin": SWAP,
                 "interactive": {"libnvs_tq5": {"burst_median_s": 3.3, "burst_max_s": 4.0,
                                                "trainer_steps_per_s": 128.2,
                                                "trainer_outlived_user": False}},
                 "two_jobs_s": {"one_after_another": 43.6}}, capsys)
    assert "launch_rate (ns per launch)" in out and "+81.6 ns added" in out
    assert "swap on_grant_swap_gbps" in out and "n/a" in out  # the hot runs were not faster
    assert "(100% of pinned)" in out  # the overlap figure against pinned memcpy
    assert "(96% of alone)" in out and "TRAINER ENDED FIRST" in out
    assert "two 1500-step jobs, one_after_another: 43.6 s" in out


def test_a_part_alone_prints_without_the_others(capsys):
    out = table({"swapin": {**SWAP, "on_grant_swap_gbps": 48.6}}, capsys)
    assert "swap on_grant_swap_gbps" in out and "90% of pinned" in out
    assert "launch_rate" not in out and "interactive" not in out


def test_bench_only_takes_known_parts(monkeypatch):
    monkeypatch.setenv("BENCH_ONLY", " swapin, launch_rate ")
    assert run_gpu.chosen_parts() == {"swapin", "launch_rate"}
    monkeypatch.delenv("BENCH_ONLY")
    assert run_gpu.chosen_parts() == set(run_gpu.PARTS)


def test_an_unknown_part_stops_before_anything_runs():
    env = {**os.environ, "BENCH_ONLY": "swapin,warp_speed"}
    done = subprocess.run([sys.executable, str(REPO / "bench" / "run_gpu.py")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "warp_speed" in done.stderr and "launch_rate" in done.stderr
