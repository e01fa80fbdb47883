"""Where a key of the config file is written, for error messages: tomllib gives values only.

A key is found by its path: ("tq",) at the top level, ("rule", 2, "weight") in the second
[[rule]] table, ("rule", 2, "match", "user") inside that rule's match. The search reads the
text as people write TOML (one key per line, tables under headers); where it cannot tell, it
falls back to the enclosing table's line, and to None when even that is not found.
"""

from __future__ import annotations

import re

_HEADER = re.compile(r"^\s*\[")
_RULE_HEADER = re.compile(r"\s*\[\[\s*rule\s*\]\]")
_RULE_PART = re.compile(r"\s*\[{1,2}\s*rule\s*\.")  # [rule.match] belongs to the rule above


def _assigns(key: str, anywhere: bool = False) -> re.Pattern:
    """`key = ...` or `key.sub = ...`, quoted or bare; at the start of a line unless
    `anywhere` (inside an inline table)."""
    start = r"(?<![\w-])" if anywhere else r"^\s*"
    quoted = re.escape(key)
    return re.compile(rf"{start}(?:{quoted}|\"{quoted}\"|'{quoted}')\s*[=.]")


def _header(key: str) -> re.Pattern:
    return re.compile(rf"^\s*\[{{1,2}}\s*(?:{re.escape(key)}|\"{re.escape(key)}\")\s*[\].]")


def _first(lines: list[str], pattern: re.Pattern, start: int, end: int) -> int | None:
    for index in range(start, end):
        if pattern.search(lines[index]):
            return index
    return None


def _rule_span(lines: list[str], number: int) -> tuple[int, int] | None:
    """The lines of the `number`-th [[rule]] table (from 1): its header up to the next table
    that is not part of it."""
    headers = [i for i, line in enumerate(lines) if _RULE_HEADER.match(line)]
    if not 1 <= number <= len(headers):
        return None
    start = headers[number - 1]
    end = next((i for i in range(start + 1, len(lines))
                if _HEADER.match(lines[i]) and not _RULE_PART.match(lines[i])), len(lines))
    return start, end


def line_of(text: str, path: tuple) -> int | None:
    """The 1-based line where the key at `path` is given, or the nearest enclosing line."""
    lines = text.splitlines()
    top_end = _first(lines, _HEADER, 0, len(lines))
    top_end = len(lines) if top_end is None else top_end
    if path[0] != "rule" or len(path) == 1:
        found = _first(lines, _assigns(path[0]), 0, top_end)
        if found is None:
            found = _first(lines, _header(path[0]), 0, len(lines))
        return None if found is None else found + 1
    span = _rule_span(lines, path[1])
    if span is None:  # rules written as an array of inline tables: point at `rule =`
        found = _first(lines, _assigns("rule"), 0, top_end)
        return None if found is None else found + 1
    start, end = span
    found = start
    if len(path) > 2:
        at = _first(lines, _assigns(path[2]), start + 1, end)
        if at is None:
            at = _first(lines, _header(f"rule.{path[2]}"), start + 1, end)
        if at is not None:
            found = at
            if len(path) > 3:
                inner = _first(lines, _assigns(path[3], anywhere=True), at, end)
                found = at if inner is None else inner
    return found + 1
