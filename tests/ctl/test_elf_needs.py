"""doctor's own ELF reader (gemshare_ctl/elf_needs.py) agrees with pyelftools on what a file
needs: its architecture and the newest glibc version; a file it cannot read is a plain
ElfProblem, never a crash."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "libnvs"))
import elf_versions  # noqa: E402
import libnvs_programs  # noqa: E402
from libnvs_programs import BUILD  # noqa: E402

from gemshare_ctl.elf_needs import ElfProblem, read_needs, version_text  # noqa: E402


@pytest.fixture(scope="module")
def files():
    libnvs_programs.make("libs")
    return [BUILD / "libnvs.so", BUILD / "x86_64" / "libnvs.so", BUILD / "aarch64" / "libnvs.so",
            Path(os.path.realpath(sys.executable))]


def test_the_architecture_and_glibc_are_pyelftools(files):
    for path in files:
        needs = read_needs(path)
        assert needs.machine == elf_versions.machine(path), path
        newest = max(elf_versions.glibc_needs(path), key=elf_versions.version_tuple)
        assert version_text(needs.newest_glibc()) == newest, path


@pytest.mark.parametrize("content, words", [
    (b"#!/bin/sh\n", "is not an ELF file"),
    (None, "is a damaged ELF file"),  # the library cut off after its first 100 bytes
    (b"", "is not an ELF file"),
])
def test_what_is_not_a_readable_library_is_said_so(files, tmp_path, content, words):
    path = tmp_path / "libnvs.so"
    path.write_bytes(files[0].read_bytes()[:100] if content is None else content)
    with pytest.raises(ElfProblem, match=words):
        read_needs(path)


def test_a_missing_file_is_said_so(tmp_path):
    with pytest.raises(ElfProblem, match="cannot read .*: No such file"):
        read_needs(tmp_path / "none.so")
