"""libnvs's folders call one way: each folder only the folders its line of the table in
libnvs/README.md ("may call") names, all of them below it there, and no two units call each other
in a circle. A unit calls another when it uses a function or variable defined there (read from
the compiled objects) or includes its header."""

from __future__ import annotations

import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from libnvs_programs import REPO

LIBNVS = REPO / "libnvs"
ROW = re.compile(r"^\| `(\w+)/` \| [^|]+ \| ([^|]+) \|$", re.M)
INCLUDE = re.compile(r'^#include "(\w+)/([\w.]+)"', re.M)
# Compile-time proofs against cuda.h and nvml.h, never part of the library.
NOT_IN_LIBRARY = {LIBNVS / "cuda" / "cuda_api_check.c", LIBNVS / "nvml" / "nvml_api_check.c"}


def table() -> list[tuple[str, set[str]]]:
    """The folders in the README's order, each with the folders it may call."""
    rows = ROW.findall((LIBNVS / "README.md").read_text())
    return [(folder, {f.strip() for f in calls.split(",")} - {"—"}) for folder, calls in rows]


def may_call() -> dict[str, set[str]]:
    return dict(table())


def units() -> list[Path]:
    return sorted(set(LIBNVS.glob("*/*.c")) - NOT_IN_LIBRARY)


def test_the_table_names_every_folder_and_calls_only_down():
    folders = [folder for folder, _ in table()]
    assert sorted(folders) == sorted(p.name for p in LIBNVS.iterdir() if p.is_dir())
    for i, (folder, calls) in enumerate(table()):
        assert calls <= set(folders[i + 1:]), f"{folder} may call a folder above it"


def test_includes_name_an_existing_header_of_a_folder_that_may_be_called():
    allowed = may_call()
    wrong = []
    for source in sorted(LIBNVS.glob("*/*.[ch]")) + sorted(LIBNVS.glob("*/*.def")):
        folder = source.parent.name
        for target, name in INCLUDE.findall(source.read_text()):
            if not (LIBNVS / target / name).is_file():
                wrong.append(f"{source.relative_to(LIBNVS)}: no {target}/{name}")
            elif target != folder and target not in allowed[folder]:
                wrong.append(f"{source.relative_to(LIBNVS)} includes {target}/{name}")
    assert wrong == []


@pytest.fixture(scope="module")
def calls(tmp_path_factory) -> dict[str, dict[str, set[str]]]:
    """{unit: {unit it calls: the symbols}}, units named folder/name, from each unit's object."""
    out = tmp_path_factory.mktemp("layers")
    cc = os.environ.get("CC", "cc")

    def symbols(source: Path) -> tuple[str, set[str], set[str]]:
        unit = f"{source.parent.name}/{source.stem}"
        obj = out / f"{source.parent.name}_{source.stem}.o"
        subprocess.run([cc, "-std=gnu11", "-O2", "-fPIC", "-pthread", f"-I{LIBNVS}", "-c",
                        str(source), "-o", str(obj)], check=True, capture_output=True, text=True)
        listed = subprocess.run(["nm", str(obj)], check=True, capture_output=True,
                                text=True).stdout.split("\n")
        fields = [line.split() for line in listed]
        used = {f[1] for f in fields if len(f) == 2 and f[0] == "U"}
        defined = {f[2] for f in fields if len(f) == 3 and f[1] in "TDBRCGSVW"}
        return unit, used, defined

    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        found = list(pool.map(symbols, units()))
    definer = {symbol: unit for unit, _, defined in found for symbol in defined}
    graph: dict[str, dict[str, set[str]]] = {}
    for unit, used, _ in found:
        graph[unit] = {}
        for symbol in used:
            callee = definer.get(symbol)
            if callee and callee != unit:
                graph[unit].setdefault(callee, set()).add(symbol)
    return graph


def test_every_unit_calls_only_its_folder_and_those_it_may_call(calls):
    allowed = may_call()
    wrong = [f"{unit} -> {callee}: {', '.join(sorted(symbols))}"
             for unit, callees in calls.items() for callee, symbols in callees.items()
             if callee.split("/")[0] not in allowed[unit.split("/")[0]] | {unit.split("/")[0]}]
    assert wrong == []


def test_no_units_call_each_other_in_a_circle(calls):
    state: dict[str, str] = {}
    circles = []

    def visit(unit: str, path: list[str]) -> None:
        state[unit] = "open"
        for callee in sorted(calls[unit]):
            if state.get(callee) == "open":
                circles.append(" -> ".join(path[path.index(callee):] + [callee]))
            elif callee not in state:
                visit(callee, path + [callee])
        state[unit] = "done"

    for unit in sorted(calls):
        if unit not in state:
            visit(unit, [unit])
    assert circles == []
