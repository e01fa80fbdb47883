"""The README's figures of the shipped library are what the build makes: its size without debug
information, and its debug file's, within a tenth (they move a little with every change to
libnvs)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "libnvs"))
import libnvs_programs  # noqa: E402
from libnvs_programs import BUILD  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TOLERANCE = 0.10


def test_the_shipped_librarys_sizes_are_the_readmes():
    libnvs_programs.make("ship-lib")
    text = " ".join((REPO / "README.md").read_text().split())
    stated = re.search(r"without debug information \(about (\d+) KB instead of (\d+) KB\)", text)
    assert stated, "the README no longer gives the shipped library's size"
    for figure, built in zip(stated.groups(), ("libnvs.so", "libnvs.so.debug")):
        size_kb = (BUILD / "ship" / built).stat().st_size / 1000
        assert abs(int(figure) - size_kb) <= TOLERANCE * size_kb, (built, figure, size_kb)
