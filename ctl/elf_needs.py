"""What a shared library asks of the machine that loads it, read from its ELF file: the
architecture it was built for, and the glibc symbol versions it needs (its .gnu.version_r).

The dynamic loader refuses a library of another architecture or word size ("wrong ELF class"),
and one that needs a symbol version its glibc lacks ("version `GLIBC_2.34' not found"): these
are what decide whether a program can preload it. Only the ELF header, the section headers and
the version-needs section are read; a file that is not ELF, or is cut short, is ElfProblem.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"\x7fELF"
SHT_GNU_VERNEED = 0x6FFFFFFE
GLIBC_VERSION = re.compile(r"GLIBC_(\d+(?:\.\d+)*)$")
# e_machine values, named as `uname -m` names the machines.
MACHINES = {3: "i686", 8: "mips", 20: "ppc", 21: "ppc64le", 22: "s390x", 40: "armv7l",
            62: "x86_64", 183: "aarch64", 243: "riscv64"}
# The names `uname -m` may give one architecture: an ELF for EM_PPC64 or EM_ARM runs on either.
SAME_MACHINE = {"ppc64": "ppc64le", "armv8l": "armv7l", "arm64": "aarch64", "amd64": "x86_64",
                "i386": "i686", "i586": "i686"}


class ElfProblem(Exception):
    """The file is not an ELF shared library that can be read here; the message says why."""


@dataclass(frozen=True)
class ElfNeeds:
    machine: str  # as `uname -m` names it, or "e_machine N" for one not named above
    bits: int  # 32 or 64
    glibc: tuple[tuple[int, ...], ...]  # every GLIBC_x.y version it needs, lowest first

    def newest_glibc(self) -> tuple[int, ...] | None:
        return self.glibc[-1] if self.glibc else None


def version_text(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def machine_name(uname_machine: str) -> str:
    """This machine's `uname -m` in the names MACHINES uses."""
    return SAME_MACHINE.get(uname_machine, uname_machine)


def read_needs(path: Path) -> ElfNeeds:
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise ElfProblem(f"cannot read {path}: {error.strerror or error}") from None
    if data[:4] != MAGIC:
        raise ElfProblem(f"{path} is not an ELF file")
    try:
        return _parse(data)
    except (struct.error, IndexError, UnicodeDecodeError):
        raise ElfProblem(f"{path} is a damaged ELF file (cut short or corrupt)") from None


def _parse(data: bytes) -> ElfNeeds:
    bits = {1: 32, 2: 64}.get(data[4])
    order = {1: "<", 2: ">"}.get(data[5])
    if bits is None or order is None:
        raise struct.error("unknown ELF class or byte order")
    machine_code = struct.unpack_from(order + "H", data, 18)[0]
    machine = MACHINES.get(machine_code, f"e_machine {machine_code}")
    if bits == 64:
        shoff, = struct.unpack_from(order + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(order + "HH", data, 0x3A)
        section = struct.Struct(order + "IIQQQQIIQQ")  # name type flags addr offset size link ...
    else:
        shoff, = struct.unpack_from(order + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(order + "HH", data, 0x2E)
        section = struct.Struct(order + "IIIIIIIIII")
    sections = [section.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    versions = set()
    for _, kind, _, _, offset, _, link, count, _, _ in sections:
        if kind == SHT_GNU_VERNEED:
            strings = sections[link][4]
            versions |= _needed_versions(data, order, offset, count, strings)
    glibc = sorted(parse_version(m[1]) for name in versions if (m := GLIBC_VERSION.match(name)))
    return ElfNeeds(machine, bits, tuple(glibc))


def _needed_versions(data: bytes, order: str, offset: int, count: int, strings: int) -> set:
    """The version names of every Verneed entry (and each of its Vernaux) from `offset`; `count`
    entries (sh_info), each linking to the next by vn_next."""
    names = set()
    for _ in range(count):
        _, aux_count, _, aux, following = struct.unpack_from(order + "HHIII", data, offset)
        at = offset + aux
        for _ in range(aux_count):
            _, _, _, name, aux_next = struct.unpack_from(order + "IHHII", data, at)
            names.add(_string(data, strings + name))
            at += aux_next
        offset += following
    return names


def _string(data: bytes, offset: int) -> str:
    end = data.index(b"\0", offset)
    return data[offset:end].decode("ascii")
