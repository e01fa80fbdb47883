"""libnvs.so loads on glibc 2.17 and newer (CentOS 7, UBI 8, Ubuntu 20.04 images...), on x86_64
and aarch64: no build of it needs a newer glibc symbol version, and the library the rest of the
suite preloads is that portable build."""

from __future__ import annotations

import os
import platform

import pytest
from elf_versions import MACHINES, machine, newer_than, version_tuple

import libnvs_programs
from libnvs_programs import BUILD, FAKECUDA, LIBNVS

GLIBC_FLOOR = "2.17"
ARCHITECTURES = sorted(MACHINES)


@pytest.fixture(scope="module")
def portable(built):
    """Both architectures' builds, beside the one for this machine."""
    libnvs_programs.make("libs")
    return {arch: BUILD / arch / "libnvs.so" for arch in ARCHITECTURES}


def test_every_build_needs_no_glibc_newer_than_2_17(portable):
    for library in (LIBNVS, *portable.values()):
        assert newer_than(library, GLIBC_FLOOR) == {}, \
            f"{library} needs these glibc versions (and symbols) above {GLIBC_FLOOR}"


def test_each_architecture_has_a_build_of_its_own(portable):
    assert {arch: machine(library) for arch, library in portable.items()} == \
        {arch: arch for arch in ARCHITECTURES}


def test_the_suite_preloads_the_portable_build(portable):
    assert LIBNVS.read_bytes() == portable[platform.machine()].read_bytes()


def test_the_check_sees_a_program_built_for_this_machines_glibc(built):
    """The stand-in is built with the host's gcc: where glibc is 2.34 or newer (dlopen moved into
    libc then, at a new version), the check must find that."""
    host = os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
    if version_tuple(host) < (2, 34):
        pytest.skip(f"this machine's glibc is {host}: programs built here need no 2.34 symbol")
    assert "dlopen" in newer_than(FAKECUDA / "standin", GLIBC_FLOOR).get("2.34", [])
