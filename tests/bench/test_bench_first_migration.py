"""bench/first_migration.py without a GPU: what it reads from bench/gpu/first_move_out's lines,
and that a probe that cannot run says why instead of stopping the bench."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import first_migration  # noqa: E402


def stand_in(tmp_path: Path, body: str) -> Path:
    program = tmp_path / "first_move_out"
    program.write_text("#!/bin/sh\n" + body)
    program.chmod(0o755)
    return program


def test_a_move_is_read_from_its_program_line_and_a_busy_line_is_not(tmp_path):
    program = stand_in(tmp_path, """echo '{"busy": true, "fills": 3}'
echo '{"way": "migrate", "programs": 1, "program": 0, "gib": 4.00, "out_s": 1.064, \
"gb_per_s": 4.04, "pinning_s": 0.000, "intact": 1}'
""")
    assert first_migration.one_move(program) == pytest.approx(4.04)


@pytest.mark.parametrize("body", [
    "echo 'cuInit failed: CUDA_ERROR_NO_DEVICE' >&2; exit 1\n",
    """echo '{"way": "migrate", "gb_per_s": 9.0, "intact": 0}'\n""",  # contents lost
    "echo 'no json'\n"])
def test_a_move_that_failed_or_lost_memory_is_an_error_with_what_the_program_said(tmp_path,
                                                                                  body):
    with pytest.raises(RuntimeError, match="first_move_out failed"):
        first_migration.one_move(stand_in(tmp_path, body))


def roomy_card() -> list[int]:
    return [143000]


def test_the_probe_says_why_it_did_not_time_anything(tmp_path, monkeypatch):
    monkeypatch.setattr(first_migration.shutil, "which", lambda name: None)
    skipped = first_migration.measure(tmp_path, roomy_card)
    assert "no nvcc" in skipped["skipped"]
    assert first_migration.line(skipped).startswith("machine's first migration: not timed (no nvcc")
    monkeypatch.setattr(first_migration.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(first_migration, "build", lambda build_dir: stand_in(tmp_path, "exit 3\n"))
    failed = first_migration.measure(tmp_path, roomy_card)
    assert "failed (3)" in failed["error"]
    # A busy card: its 4 GiB would be more than half of what is free.
    busy = first_migration.measure(tmp_path, lambda: [143000, 7000])
    assert busy == {"skipped": "7000 MiB free, less than the 8192 MiB this part leaves itself"}


def test_the_line_gives_the_first_rate_and_the_one_after():
    line = first_migration.line({"gib": 4, "first_gb_per_s": 3.43, "again_gb_per_s": 12.77})
    assert line == ("machine's first migration (4 GiB, once, before the parts): 3.4 GB/s, "
                    "then 12.8 GB/s")
