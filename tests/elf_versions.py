"""What a shared library or program asks of glibc, read from its ELF file with pyelftools.

The dynamic loader refuses a file that needs a symbol version its glibc lacks ("version
`GLIBC_2.34' not found"), so the versions a file needs (its .gnu.version_r) are what decides the
oldest glibc it loads on.
"""

from __future__ import annotations

import re
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection

GLIBC_VERSION = re.compile(r"GLIBC_(\d+(?:\.\d+)*)$")
# e_machine of the architectures libnvs.so is built for, by the name `uname -m` gives.
MACHINES = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64"}


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def machine(path: Path) -> str:
    """The architecture the file is for, as `uname -m` names it ('x86_64', 'aarch64')."""
    with open(path, "rb") as file:
        found = ELFFile(file)["e_machine"]
    names = {value: name for name, value in MACHINES.items()}
    return names.get(found, found)


def glibc_needs(path: Path) -> dict[str, list[str]]:
    """Each glibc version the file needs ('2.17', ...) -> the symbols it needs at that version
    (none listed for a version named in .gnu.version_r that no symbol uses)."""
    with open(path, "rb") as file:
        elf = ELFFile(file)
        by_index: dict[int, str] = {}
        for section in elf.iter_sections():
            if isinstance(section, GNUVerNeedSection):
                for _, auxiliaries in section.iter_versions():
                    for auxiliary in auxiliaries:
                        match = GLIBC_VERSION.match(auxiliary.name)
                        if match:
                            by_index[auxiliary["vna_other"]] = match[1]
        needs: dict[str, list[str]] = {version: [] for version in by_index.values()}
        versym = next((s for s in elf.iter_sections() if isinstance(s, GNUVerSymSection)), None)
        dynsym = elf.get_section_by_name(".dynsym")
        if versym is not None and dynsym is not None:
            for index, symbol in enumerate(dynsym.iter_symbols()):
                version = by_index.get(versym.get_symbol(index)["ndx"])
                if version is not None:
                    needs[version].append(symbol.name)
    return needs


def newer_than(path: Path, floor: str) -> dict[str, list[str]]:
    """The glibc versions above `floor` the file needs, with their symbols; empty when it loads
    on glibc `floor`."""
    return {version: symbols for version, symbols in glibc_needs(path).items()
            if version_tuple(version) > version_tuple(floor)}


def is_static(program: Path) -> bool:
    """Whether the program names no dynamic loader (PT_INTERP): the kernel starts it itself,
    and it runs its own first instruction with nothing before it."""
    with open(program, "rb") as file:
        return all(segment["p_type"] != "PT_INTERP" for segment in ELFFile(file).iter_segments())
