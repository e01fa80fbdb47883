"""The registry's table (bench/scenarios.py): scenario by bound, the figure `make bench-gpu`
measured, the bound and whether it was kept. Pure functions over bench-gpu results, so that it
is tested without a GPU (tests/bench/test_scenario_registry.py).

    python3 bench/scenario_table.py set1.json set2.json [--json table.json]

prints the one table of several runs' BENCH_JSON files (BENCH_SET=1 and BENCH_SET=2 on a lent
machine), a later file's part replacing an earlier one's; `--list` prints the registry itself.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenarios import SCENARIOS, Bound, Scenario, figures, sets_of, worst  # noqa: E402

PASS, FAIL, NOT_RUN = "pass", "FAIL", "not run"


def _obstacle(bound: Bound, results: dict) -> tuple[str, str] | None:
    """(verdict, why) where the part, or an entry on a key's way, was skipped or failed."""
    if bound.part not in results:
        return NOT_RUN, f"part {bound.part} not run"
    for key in bound.keys:
        value = results[bound.part]
        for step in ("", *key):
            if step and step != "*":
                value = value.get(step) if isinstance(value, dict) else None
            if not isinstance(value, dict):
                break
            if "skipped" in value:
                return NOT_RUN, f"skipped: {value['skipped']}"
            if "error" in value:
                return FAIL, f"error: {str(value['error']).splitlines()[0][:120]}"
    return None


def row(scenario: Scenario, bound: Bound, results: dict) -> dict:
    """One bound's line: the figure it is judged by, and the verdict."""
    figure = worst(bound, figures(bound, results))
    entry = {"scenario": scenario.name, "bound": bound.name, "figure": figure,
             "comparison": bound.comparison, "value": bound.value, "unit": bound.unit,
             "part": bound.part, "note": ""}
    met = bound.met(figure)
    if met is not None:
        return {**entry, "verdict": PASS if met else FAIL}
    obstacle = _obstacle(bound, results)
    if obstacle is None:  # the part ran, yet wrote no such figure: nothing shows it was kept
        obstacle = FAIL, "no figure: the part ran without it"
    if obstacle[0] == NOT_RUN and scenario.gpus > 1:
        obstacle = NOT_RUN, f"needs {scenario.gpus} GPUs; {obstacle[1]}"
    elif obstacle[0] == NOT_RUN and sets_of(scenario):
        obstacle = NOT_RUN, (f"{obstacle[1]}; measured by BENCH_SET "
                             + " and ".join(map(str, sets_of(scenario))))
    return {**entry, "verdict": obstacle[0], "note": obstacle[1]}


def rows(results: dict) -> list[dict]:
    return [row(scenario, bound, results) for scenario in SCENARIOS for bound in scenario.bounds]


def _number(value, unit: str) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "n/a"
    text = f"{value:.3g}" if isinstance(value, float) else str(value)
    return f"{text}{unit}" if unit == "x" else f"{text} {unit}".rstrip()


def format_table(entries: list[dict]) -> str:
    """Scenario by bound: figure, bound, verdict (and why, where nothing was measured)."""
    header = ("scenario", "bound", "figure", "kept if", "verdict")
    lines = [(entry["scenario"], entry["bound"], _number(entry["figure"], entry["unit"]),
              f"{entry['comparison']} {_number(entry['value'], entry['unit'])}",
              entry["verdict"] + (f" ({entry['note']})" if entry["note"] else ""))
             for entry in entries]
    widths = [max(len(line[column]) for line in [header, *lines]) for column in range(4)]
    out = []
    for index, line in enumerate([header, *lines]):
        out.append("  ".join(cell.ljust(width) for cell, width in zip(line, widths))
                   + "  " + line[4])
        if index == 0:
            out.append("  ".join("-" * width for width in widths) + "  " + "-" * 7)
    counted = [entry["verdict"] for entry in entries]
    out.append(f"{counted.count(PASS)} bounds kept, {counted.count(FAIL)} missed, "
               f"{counted.count(NOT_RUN)} not run")
    return "\n".join(out)


def print_registry(results: dict) -> list[dict]:
    """Prints the registry's table for these results; returns its rows (for the JSON)."""
    entries = rows(results)
    env = results.get("environment") or {}
    print(f"\nscenario registry (bench/scenarios.py): {env.get('gpu', 'GPU n/a')} | "
          f"{env.get('date', '')}")
    print(format_table(entries))
    return entries


def describe() -> str:
    """The registry as a reader wants it: each scenario, its programs, bounds, tests and part."""
    out = []
    for scenario in SCENARIOS:
        where = (f"BENCH_SET {' and '.join(map(str, sets_of(scenario)))}" if sets_of(scenario)
                 else f"needs {scenario.gpus} GPUs: BENCH_ONLY={','.join(scenario.parts)}")
        out.append(f"{scenario.name} ({where})\n  programs: {scenario.programs}")
        for bound in scenario.bounds:
            keys = "; ".join("/".join(key) for key in bound.keys)
            out.append(f"  bound: {bound.name} {bound.comparison} "
                       f"{_number(bound.value, bound.unit)}  <- {bound.part}: {keys}")
        out += [f"  fake driver: {test}" for test in scenario.fake_tests]
    return "\n".join(out)


def merged(paths: list[Path]) -> dict:
    results: dict = {}
    for path in paths:
        try:
            loaded = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise SystemExit(f"{path}: not a bench-gpu JSON file ({exc})")
        if not isinstance(loaded, dict):
            raise SystemExit(f"{path}: not a bench-gpu JSON file (no object at its top)")
        first = results.get("environment")
        results.update(loaded)
        results["environment"] = first or loaded.get("environment")  # the first run's machine
        results.pop("registry", None)  # each run's own table; this one is made afresh
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the registry's table of bench-gpu JSON files")
    parser.add_argument("results", nargs="*", type=Path)
    parser.add_argument("--json", type=Path, help="write the table's rows there")
    parser.add_argument("--list", action="store_true", help="print the registry itself")
    options = parser.parse_args(argv)
    if options.list:
        print(describe())
        return 0
    if not options.results:
        parser.error("name the bench-gpu JSON files, or --list")
    entries = print_registry(merged(options.results))
    if options.json:
        options.json.write_text(json.dumps(entries, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
