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

from .parsing import Config
from .rules import TEXT_KEYS, WILDCARD, Rule, RuleIndex, holds_for_all, located


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
    earlier = RuleIndex()  # the rules before `later`
    for later in config.rules:
        by = earlier.first(dict(later.match), lambda rule: _covers(rule, later))
        if by is not None:
            found.append(Shadow(later, by))
        earlier.add(later)
    return found


def _covers(earlier: Rule, later: Rule) -> bool:
    """Whether every client that `later` matches is matched by `earlier`."""
    wanted = dict(later.match)
    return all(holds_for_all(key, value) or (key in wanted and _takes(key, value, wanted[key]))
               for key, value in earlier.match)


def _takes(key: str, earlier, later) -> bool:
    """Whether the earlier value holds wherever the later one does."""
    if earlier == later:
        return True
    return key in TEXT_KEYS and isinstance(later, str) and not WILDCARD.search(later) and \
        fnmatchcase(later, earlier)


def _named(rule: Rule) -> str:
    return f"{rule.number} (line {rule.line})" if rule.line else str(rule.number)
