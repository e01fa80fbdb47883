"""What nvidia-smi and pynvml show under libnvs.so on a real GPU when the scheduler sends a
memory limit (a scripted stand-in scheduler, tests/libnvs/scripted_scheduler.py): the limit as
the card's memory and what the rest of the budget holds as used. Neither program uses CUDA, so
each registers view-only to learn its limit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

LIBNVS_TESTS = Path(__file__).resolve().parents[1] / "libnvs"
sys.path.insert(0, str(LIBNVS_TESTS))
from scripted_scheduler import ScriptedScheduler  # noqa: E402
from gemshare_nvs import protocol as p  # noqa: E402

LIMIT_MIB = 4096
BUDGET_MIB = 1024
QUERY = ["nvidia-smi", "--query-gpu=memory.total,memory.used", "--format=csv"]


@pytest.fixture
def limiting():
    """A scheduler stand-in that gives every program a 4 GiB limit, 1 GiB of it held by others."""
    directory = Path(tempfile.mkdtemp(prefix="gs-", dir="/tmp"))
    scheduler = ScriptedScheduler(directory)
    scheduler.memory_limit = LIMIT_MIB << 20
    scheduler.budget_used = BUDGET_MIB << 20
    yield scheduler
    scheduler.close()
    shutil.rmtree(directory, ignore_errors=True)


def run(command: list[str], libnvs: Path | None = None, socket: Path | None = None):
    """(pid, stdout) of the command, under libnvs.so when given."""
    env = dict(os.environ)
    if libnvs is not None:
        env.update(LD_PRELOAD=str(libnvs), GEMSHARE_SOCKET=str(socket))
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, f"{command}: exit {process.returncode}\n{out}\n{err}"
    return process.pid, out


def memory_rows(csv: str) -> list[tuple[int, int]]:
    """(total, used) in MiB per GPU from nvidia-smi's CSV ("4096 MiB, 1024 MiB" under a header)."""
    header, *rows = [line for line in csv.splitlines() if line.strip()]
    assert header.startswith("memory.total"), csv
    return [tuple(int(field.strip().removesuffix(" MiB")) for field in row.split(","))
            for row in rows]


def test_nvidia_smi_shows_the_limit_as_the_card(libnvs, limiting):
    pid, out = run(QUERY, libnvs, limiting.socket)
    rows = memory_rows(out)
    assert rows and all(row == (LIMIT_MIB, BUDGET_MIB) for row in rows), out
    ((_, register),) = limiting.received(pid, p.Register)
    assert register.flags == p.REG_VIEW_ONLY
    # Without the library, the card as it is: larger than the limit on the H100/H200.
    _, plain = run(QUERY)
    assert all(total > LIMIT_MIB for total, _ in memory_rows(plain)), plain


def test_pynvml_shows_the_limit_as_the_card(libnvs, limiting):
    _, out = run([sys.executable, str(LIBNVS_TESTS / "pynvml_reader.py")], libnvs,
                 limiting.socket)
    gpus = json.loads(out)["gpus"]
    mib = 1 << 20
    assert gpus and all((gpu["total"], gpu["used"]) == (LIMIT_MIB * mib, BUDGET_MIB * mib)
                        and gpu["v2"]["total"] == LIMIT_MIB * mib and gpu["v2"]["reserved"] == 0
                        for gpu in gpus), gpus
