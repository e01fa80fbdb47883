"""Rules of a config file that can never match: each client goes to an earlier rule first.

Rules are tried in file order and the first that matches wins, so a rule is dead when an earlier
rule's match holds for every client that the later one's does: every key of the earlier match
is in the later one with the same value, or with a literal value that the earlier's wildcard
takes (`pod = "train-*"` before `pod = "train-1"`); a text key whose value is `"*"` holds for
everyone, given or not. Whether a uid and a user name are the same account is not looked up, so
only these certain cases are found.

Such a file is valid and runs as written, so a dead rule is warned about, never refused: it is
most likely a narrow rule put after a broad one by mistake.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from .parsing import TEXT_KEYS, WILDCARD, Config, Rule, located


@dataclass(frozen=True)
class Shadow:
    rule: Rule  # the rule that never matches
    by: Rule  # the first earlier rule that takes every client it would

    def warning(self, path: str) -> str:
        """One line naming both rules and their lines, as the log and `config check` say it."""
        return (f"{located(path, self.rule.line)}: rule {_named(self.rule)} can never match: "
                f"rule {_named(self.by)} comes first and matches every client it would; put "
                f"the narrower rule first, or remove rule {self.rule.number}")


def shadows(config: Config) -> list[Shadow]:
    """Each rule of `config` that can never match, in file order, with the rule shadowing it."""
    found = []
    earlier = _EarlierRules()
    for later in config.rules:
        by = earlier.first_covering(later)
        if by is not None:
            found.append(Shadow(later, by))
        earlier.add(later)
    return found


class _EarlierRules:
    """The rules seen so far, kept so that finding the first one that covers a later rule does
    not compare it with every one of them: the rules whose match needs only plain values are
    looked up by those values, one lookup per set of keys that such rules use, and only rules
    with a wildcard are compared one by one (those whose keys the later rule has)."""

    def __init__(self):
        # keys a match needs (sorted) -> their values -> the first rule needing exactly them
        self._plain: dict[tuple, dict[tuple, Rule]] = {}
        # keys a match needs (sorted) -> the rules with a wildcard among them, in file order
        self._patterned: dict[tuple, list[Rule]] = {}

    def add(self, rule: Rule) -> None:
        needs = _needs(rule)
        keys = tuple(sorted(needs))
        if any(_is_pattern(key, value) for key, value in needs.items()):
            self._patterned.setdefault(keys, []).append(rule)
        else:
            self._plain.setdefault(keys, {}).setdefault(tuple(needs[key] for key in keys), rule)

    def first_covering(self, later: Rule) -> Rule | None:
        wanted = dict(later.match)
        candidates = []
        for keys, by_values in self._plain.items():
            if all(key in wanted for key in keys):
                rule = by_values.get(tuple(wanted[key] for key in keys))
                if rule is not None:
                    candidates.append(rule)
        for keys, rules in self._patterned.items():
            if all(key in wanted for key in keys):
                rule = next((rule for rule in rules if _covers(rule, later)), None)
                if rule is not None:
                    candidates.append(rule)
        return min(candidates, key=lambda rule: rule.number, default=None)


def _needs(rule: Rule) -> dict:
    """The keys of a rule's match that some client fails: all but text keys of "*"."""
    return {key: value for key, value in rule.match if not _holds_for_all(key, value)}


def _is_pattern(key: str, value) -> bool:
    return key in TEXT_KEYS and isinstance(value, str) and bool(WILDCARD.search(value))


def _covers(earlier: Rule, later: Rule) -> bool:
    """Whether every client that `later` matches is matched by `earlier`."""
    wanted = dict(later.match)
    return all(_holds_for_all(key, value) or (key in wanted and _takes(key, value, wanted[key]))
               for key, value in earlier.match)


def _holds_for_all(key: str, value) -> bool:
    return key in TEXT_KEYS and value == "*"


def _takes(key: str, earlier, later) -> bool:
    """Whether the earlier value holds wherever the later one does."""
    if earlier == later:
        return True
    return key in TEXT_KEYS and isinstance(later, str) and not WILDCARD.search(later) and \
        fnmatchcase(later, earlier)


def _named(rule: Rule) -> str:
    return f"{rule.number} (line {rule.line})" if rule.line else str(rule.number)
