"""Where a key of the config file is written, for error messages: tomllib gives values only.

A key is found by its path: ("tq",) at the top level, ("rule", 2, "weight") in the second
[[rule]] table, ("rule", 2, "match", "user") inside that rule's match. The search reads the
text as people write TOML (one key per line, tables under headers); where it cannot tell, it
falls back to the enclosing table's line, and to None when even that is not found.

`KeyLines` reads the text once: its lines, where the top level ends and where each [[rule]]
table spans. A lookup then reads the top level or one rule's lines only, so finding the line of
every rule of a file costs one pass over it, not one per rule.
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


class KeyLines:
    """One file's text, read once for the lines of its keys."""

    def __init__(self, text: str):
        self.lines = text.splitlines()
        headers = [index for index, line in enumerate(self.lines) if _HEADER.match(line)]
        self.top_end = headers[0] if headers else len(self.lines)
        # Each [[rule]] table: its header up to the next table that is not part of it. The
        # search for that end stops at the next [[rule]], so each header is passed once.
        self.rule_spans: list[tuple[int, int]] = []
        for position, start in enumerate(headers):
            if _RULE_HEADER.match(self.lines[start]):
                end = next((later for later in headers[position + 1:]
                            if not _RULE_PART.match(self.lines[later])), len(self.lines))
                self.rule_spans.append((start, end))

    def _first(self, pattern: re.Pattern, start: int, end: int) -> int | None:
        for index in range(start, end):
            if pattern.search(self.lines[index]):
                return index
        return None

    def line_of(self, path: tuple) -> int | None:
        """The 1-based line where the key at `path` is given, or the nearest enclosing line."""
        if path[0] != "rule" or len(path) == 1:
            found = self._first(_assigns(path[0]), 0, self.top_end)
            if found is None:
                found = self._first(_header(path[0]), 0, len(self.lines))
            return None if found is None else found + 1
        if not 1 <= path[1] <= len(self.rule_spans):
            # Rules written as an array of inline tables: point at `rule =`.
            found = self._first(_assigns("rule"), 0, self.top_end)
            return None if found is None else found + 1
        start, end = self.rule_spans[path[1] - 1]
        found = start
        if len(path) > 2:
            at = self._first(_assigns(path[2]), start + 1, end)
            if at is None:
                at = self._first(_header(f"rule.{path[2]}"), start + 1, end)
            if at is not None:
                found = at
                if len(path) > 3:
                    inner = self._first(_assigns(path[3], anywhere=True), at, end)
                    found = at if inner is None else inner
        return found + 1

