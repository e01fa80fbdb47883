"""libnvs's debug lines in a bench-gpu part's programs (bench/gpu_runs.py): off unless the part's
own variable asks, since GEMSHARE_DEBUG in the caller's environment never reaches them."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import gpu_runs  # noqa: E402


def test_a_parts_debug_variable_turns_libnvs_debug_lines_on_for_its_programs_alone():
    env = {"LD_PRELOAD": "/lib/libnvs.so"}
    assert gpu_runs.with_debug(env, "MEMLIMIT_DEBUG", {"MEMLIMIT_DEBUG": "1"}) == \
        {"LD_PRELOAD": "/lib/libnvs.so", "GEMSHARE_DEBUG": "1"}
    assert gpu_runs.with_debug(env, "MEMLIMIT_DEBUG", {"NOTEBOOKS_DEBUG": "1"}) == env
    assert gpu_runs.with_debug(env, "MEMLIMIT_DEBUG", {"MEMLIMIT_DEBUG": "0"}) == env
    assert env == {"LD_PRELOAD": "/lib/libnvs.so"}  # the caller's own is left as it was


def test_gemshare_debug_in_the_callers_environment_does_not_reach_the_programs(monkeypatch):
    monkeypatch.setenv("GEMSHARE_DEBUG", "1")
    assert "GEMSHARE_DEBUG" not in gpu_runs.inherited()
