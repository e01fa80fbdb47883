"""bench/gpu/check_turns.py: programs that check their elements one at a time, the next once the
last has exited; a program whose turn never comes goes on after its timeout rather than hang."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "gpu"))
import check_turns  # noqa: E402

# Takes its turn, says when, holds it 0.4 s, says when it ends, exits.
PROGRAM = """import sys, time
sys.path.insert(0, sys.argv[1])
from check_turns import wait_turn
took = wait_turn(__import__("pathlib").Path(sys.argv[2]), 30)
print("began", time.time(), took, flush=True)
time.sleep(0.4)
print("ended", time.time(), flush=True)
"""


def test_the_next_program_begins_only_once_the_last_has_exited(tmp_path):
    lock = tmp_path / "finished.check-lock"
    programs = [subprocess.Popen([sys.executable, "-c", PROGRAM, str(REPO / "bench" / "gpu"),
                                  str(lock)], stdout=subprocess.PIPE, text=True)
                for _ in range(3)]
    spans = []
    for program in programs:
        out, _ = program.communicate(timeout=60)
        lines = dict((line.split()[0], line.split()[1:]) for line in out.splitlines())
        assert lines["began"][1] == "True"
        spans.append((float(lines["began"][0]), float(lines["ended"][0])))
    spans.sort()
    for (_, ended), (began, _) in zip(spans, spans[1:]):
        assert began >= ended, spans


def test_a_turn_that_never_comes_ends_at_the_timeout(tmp_path):
    lock = tmp_path / "finished.check-lock"
    assert check_turns.wait_turn(lock, 5)  # held by this process from now on
    waiter = subprocess.run([sys.executable, "-c", "import sys, pathlib, time; "
                             f"sys.path.insert(0, {str(REPO / 'bench' / 'gpu')!r}); "
                             "from check_turns import wait_turn; t = time.monotonic(); "
                             f"print(wait_turn(pathlib.Path({str(lock)!r}), 0.3), "
                             "round(time.monotonic() - t, 1))"],
                            capture_output=True, text=True, timeout=60)
    took, seconds = waiter.stdout.split()
    assert took == "False" and 0.3 <= float(seconds) < 5
