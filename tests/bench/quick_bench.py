"""Runs a bench script in its quick mode, as the bench tests do: for real, with tiny samples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_quick(script: str, out: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """bench/<script> with BENCH_QUICK=1, its JSON written to `out`; it must succeed. Its run
    and the results it wrote."""
    env = {**os.environ, "BENCH_QUICK": "1", "BENCH_JSON": str(out)}
    done = subprocess.run([sys.executable, str(REPO / "bench" / script)], env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    return done, json.loads(out.read_text())
