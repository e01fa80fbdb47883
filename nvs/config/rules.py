"""A config file's rules, and finding the first one whose match holds.

Rules are tried in file order and the first that matches wins. Most rules match plain values
(`label = "notebook"`, `uid = 1000`): `RuleIndex` looks those up by their values, one lookup per
set of keys such rules use, so that finding a client's rule, or a dead rule's shadow
(shadows.py), costs far less than trying every rule. Only rules with a wildcard are tried one by
one, and only those that could come before the best plain one found.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

from ..core.model.terms import Identity

ID_KEYS = ("uid", "gid")
NAME_KEYS = ("user", "group")  # must name an account that exists
# Text known of a client, with the most characters it can have: a longer value in a rule could
# never match. Shell wildcards (*, ?, [...]) may stand for any part. A container's name comes
# only from the node (a DNS label), never from the program.
TEXT_KEYS = {"process": 15, "pod": 255, "namespace": 63, "label": 63, "container": 63}
MATCH_KEYS = (*ID_KEYS, *NAME_KEYS, *TEXT_KEYS)
# What makes a text value a pattern rather than the text itself (fnmatch's special characters).
WILDCARD = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class Rule:
    number: int  # from 1, in file order
    line: int | None
    match: tuple[tuple[str, object], ...]  # (key, value), every one must hold
    values: tuple[tuple[str, object], ...]  # checked terms, by TERM_NAMES
    source: str  # as status names it

    def matches(self, identity: Identity) -> bool:
        for key, wanted in self.match:
            have = getattr(identity, key)
            if key in TEXT_KEYS:
                if not fnmatchcase(have, wanted):
                    return False
            elif have != wanted:
                return False
        return True


def located(path: str, line: int | None) -> str:
    """`path:line`, or the path alone when the line is not known."""
    return f"{path}:{line}" if line else path


def holds_for_all(key: str, value) -> bool:
    return key in TEXT_KEYS and value == "*"


def is_pattern(key: str, value) -> bool:
    return key in TEXT_KEYS and isinstance(value, str) and bool(WILDCARD.search(value))


def needs(rule: Rule) -> dict:
    """The keys of a rule's match that some client fails: all but text keys of "*"."""
    return {key: value for key, value in rule.match if not holds_for_all(key, value)}


class RuleIndex:
    """Rules, added in file order, kept for finding the first whose match holds."""

    def __init__(self, rules: Iterable[Rule] = ()):
        # keys a match needs (sorted) -> their values -> the first rule needing exactly them
        self._plain: dict[tuple, dict[tuple, Rule]] = {}
        # keys a match needs (sorted) -> the rules with a wildcard among them, in file order
        self._patterned: dict[tuple, list[Rule]] = {}
        for rule in rules:
            self.add(rule)

    def add(self, rule: Rule) -> None:
        wanted = needs(rule)
        keys = tuple(sorted(wanted))
        if any(is_pattern(key, value) for key, value in wanted.items()):
            self._patterned.setdefault(keys, []).append(rule)
        else:
            self._plain.setdefault(keys, {}).setdefault(tuple(wanted[key] for key in keys), rule)

    def first(self, values: Mapping[str, object], holds: Callable[[Rule], bool]) -> Rule | None:
        """The first rule whose plain values are those of `values` (a key it needs missing
        there, it does not hold) and, for a rule with a wildcard, for which `holds(rule)`."""
        found = None
        for keys, by_values in self._plain.items():
            if all(key in values for key in keys):
                rule = by_values.get(tuple(values[key] for key in keys))
                if rule is not None and (found is None or rule.number < found.number):
                    found = rule
        for keys, rules in self._patterned.items():
            if all(key in values for key in keys):
                for rule in rules:
                    if found is not None and rule.number > found.number:
                        break
                    if holds(rule):
                        found = rule
                        break
        return found

    def first_for(self, identity: Identity) -> Rule | None:
        """The first rule that matches a client."""
        values = {key: getattr(identity, key) for key in MATCH_KEYS}
        return self.first(values, lambda rule: rule.matches(identity))
