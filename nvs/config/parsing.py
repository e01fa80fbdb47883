"""The config file: scheduler settings, and the rules that give each client its terms.

`parse(text, path)` turns the file's text into a `Config`, or raises `ConfigError` listing its
problems (the first MAX_LISTED_PROBLEMS) with their lines and keys; nothing else is read or
written (only user and group names are looked up, through `names`, which a test may replace).
Values pass the same checks as on the command line and in gemsharectl (settings.py).

    tq = 30                                  # settings: as the command line's, by their names
    [[rule]]                                 # rules, in order: the first that matches wins
    match = { uid = 1000, process = "python3" }   # every key given must hold
    memory_limit = "16GiB"
    gpu_limit = 0.5

`Config.terms` is the function from a client's Identity to its Terms that the policy applies.
"""

from __future__ import annotations

import difflib
import re
import sys
from dataclasses import dataclass, field
from typing import Callable

from ..core.model.terms import Identity, Terms
from . import names as system_names
from .lines import KeyLines
from .rules import ID_KEYS, MATCH_KEYS, NAME_KEYS, TEXT_KEYS, WILDCARD, Rule, RuleIndex, located
from .settings import (
    CAPACITY_MIB,
    COMPUTE_CAP,
    CONTEXT_RESERVE_MIB,
    CRI_SOCKET,
    GPU_LIMIT,
    GRACE_MS,
    MEMORY_LIMIT,
    MIN_SLICE_MS,
    MPS_PRIORITY,
    NODE_IDENTITY_SOCKET,
    POD_RESOURCES_SOCKET,
    SM_SHARE,
    STAGING_MAX_MIB,
    TQ,
    WEIGHT,
    WholeNumber,
    check_flag,
    check_mode,
    check_pipe_directory,
    shown,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

# Settings a file may give, each checked as on the command line.
SETTING_CHECKS = {
    "tq": TQ.check, "anti_thrash": check_mode, "min_slice_ms": MIN_SLICE_MS.check,
    "grace_ms": GRACE_MS.check, "capacity_mib": CAPACITY_MIB.check,
    "context_reserve_mib": CONTEXT_RESERVE_MIB.check, "staging_max_mib": STAGING_MAX_MIB.check,
    "mps": check_flag("mps"),
    "mps_pipe_directory": check_pipe_directory, "cri_socket": CRI_SOCKET,
    "pod_resources_socket": POD_RESOURCES_SOCKET, "node_identity_socket": NODE_IDENTITY_SOCKET,
    "compute_cap": COMPUTE_CAP.check,
}
TERM_CHECKS = {"weight": WEIGHT.check, "gpu_limit": GPU_LIMIT.check,
               "memory_limit": MEMORY_LIMIT.check, "sm_share": SM_SHARE.check,
               "mps": check_flag("mps"), "mps_priority": MPS_PRIORITY.check}
RULE_KEYS = ("match", *TERM_CHECKS)
ID_CHECKS = {name: WholeNumber(name, 0, 2 ** 32 - 2).check for name in ID_KEYS}
# `[rule]` for `[[rule]]` is the likely slip with rules: alone it gives one table, beside a
# `[[rule]]` TOML refuses the file in words that do not say which brackets to change.
RULE_TABLE_HINT = "`[rule]` declares one table; rules are `[[rule]]`, each with two brackets"
SINGLE_RULE_HEADER = re.compile(r"^[ \t]*\[[ \t]*(?:rule|\"rule\"|'rule')[ \t]*\][ \t]*(?:#.*)?$",
                                re.MULTILINE)
RULES_HEADER = re.compile(r"^[ \t]*\[\[[ \t]*(?:rule|\"rule\"|'rule')[ \t]*\]\]", re.MULTILINE)
# Problems listed with their lines; past these a refused file's further problems are counted
# only, so that a huge bad file costs neither a search per problem nor a log line per problem.
MAX_LISTED_PROBLEMS = 50


@dataclass(frozen=True)
class Names:
    """How a rule's user and group names are checked: the system's account databases unless a
    test says otherwise."""
    user_exists: Callable[[str], bool] = system_names.user_exists
    group_exists: Callable[[str], bool] = system_names.group_exists


@dataclass(frozen=True)
class Problem:
    line: int | None
    key: str  # as the file spells it, with the rule's number: "tq", "rule 2 match.user"
    message: str

    def where(self, path: str) -> str:
        at = f"{path}:{self.line}" if self.line else path
        return f"{at}: {self.key}: {self.message}" if self.key else f"{at}: {self.message}"


class ConfigError(Exception):
    """A file refused as a whole; `problems` says what is wrong with it, in file order, and
    `unlisted` how many more problems it has past MAX_LISTED_PROBLEMS."""

    def __init__(self, path: str, problems: list[Problem], unlisted: int = 0):
        self.path = path
        self.problems = tuple(sorted(problems, key=lambda p: p.line or 0))
        self.unlisted = unlisted
        first = self.problems[0]
        self.line, self.key, self.message = first.line, first.key, first.message
        super().__init__("; ".join(self.lines()))

    @property
    def count(self) -> int:
        """Every problem found, listed or not."""
        return len(self.problems) + self.unlisted

    def words(self) -> str:
        """"1 problem", "3 problems": how many, as messages say it."""
        return f"{self.count} problem{'' if self.count == 1 else 's'}"

    def lines(self) -> list[str]:
        listed = [problem.where(self.path) for problem in self.problems]
        if self.unlisted:
            listed.append(f"{self.path}: {self.unlisted} more problem"
                          f"{'' if self.unlisted == 1 else 's'} past the first "
                          f"{len(self.problems)}, not listed")
        return listed


@dataclass(frozen=True)
class Config:
    path: str
    settings: dict = field(default_factory=dict)  # checked values of the settings given
    setting_lines: dict = field(default_factory=dict)  # and where
    rules: tuple[Rule, ...] = ()
    index: RuleIndex = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        # Made with the Config, where the file is read: off the event loop.
        object.__setattr__(self, "index", RuleIndex(self.rules))

    def terms(self, identity: Identity) -> Terms:
        """The terms of the first rule that matches `identity`; defaults when none does."""
        rule = self.index.first_for(identity)
        return Terms() if rule is None else Terms().with_values(dict(rule.values), rule.source)

    def source(self, setting: str) -> str:
        return f"config ({located(self.path, self.setting_lines.get(setting))})"


def _suggestion(key: str, known) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class _Reader:
    """One pass over a parsed file, gathering problems instead of stopping at the first."""

    def __init__(self, text: str, path: str, names: Names):
        self.lines, self.path, self.names = KeyLines(text), path, names
        self.problems: list[Problem] = []
        self.unlisted = 0

    @property
    def failed(self) -> int:
        return len(self.problems) + self.unlisted

    def refuse(self, path: tuple, key: str, message: str) -> None:
        if len(self.problems) >= MAX_LISTED_PROBLEMS:
            self.unlisted += 1
            return
        self.problems.append(Problem(self.lines.line_of(path), key, message))

    def checked(self, check, value, path: tuple, key: str):
        try:
            return check(value)
        except ValueError as exc:
            self.refuse(path, key, str(exc))
            return None

    def config(self, data: dict) -> Config:
        settings, lines = {}, {}
        for key, value in data.items():
            if key == "rule":
                continue
            if key not in SETTING_CHECKS:
                self.refuse((key,), key, f"unknown setting {shown(key)}"
                            f"{_suggestion(key, [*SETTING_CHECKS, 'rule'])}; a config file takes "
                            f"{', '.join(SETTING_CHECKS)} and [[rule]] tables")
                continue
            checked = self.checked(SETTING_CHECKS[key], value, (key,), key)
            if checked is not None:
                settings[key], lines[key] = checked, self.lines.line_of((key,))
        return Config(self.path, settings, lines, self.rules(data.get("rule", [])))

    def rules(self, tables) -> tuple[Rule, ...]:
        if isinstance(tables, dict):
            self.refuse(("rule",), "rule", RULE_TABLE_HINT)
            return ()
        if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
            self.refuse(("rule",), "rule", "rules are written as [[rule]] tables (double "
                                           "brackets), one per rule")
            return ()
        return tuple(rule for number, table in enumerate(tables, 1)
                     if (rule := self.rule(number, table)) is not None)

    def rule(self, number: int, table: dict) -> Rule | None:
        here, before = ("rule", number), self.failed
        for key in table.keys() - set(RULE_KEYS):
            self.refuse((*here, key), f"rule {number} {key}",
                        f"unknown key {shown(key)}{_suggestion(key, RULE_KEYS)}; a rule takes "
                        f"{', '.join(RULE_KEYS)}")
        match = self.match(number, table.get("match"))
        values = tuple((key, self.checked(check, table[key], (*here, key), f"rule {number} {key}"))
                       for key, check in TERM_CHECKS.items() if key in table)
        if self.failed > before:
            return None
        line = self.lines.line_of(here)
        return Rule(number, line, match, values,
                    f"config rule {number} ({located(self.path, line)})")

    def match(self, number: int, match) -> tuple:
        here, key = ("rule", number, "match"), f"rule {number} match"
        if match is None:
            self.refuse(here[:2], key, "missing: a rule must say which clients it is for, e.g. "
                                       'match = { label = "notebook" } (process = "*" for all)')
            return ()
        if not isinstance(match, dict) or not match:
            self.refuse(here, key, f"must be a table of one or more of {', '.join(MATCH_KEYS)}, "
                                   f"not {shown(match)}")
            return ()
        return tuple((name, self.match_value(number, name, value))
                     for name, value in match.items())

    def match_value(self, number: int, name: str, value):
        path, key = ("rule", number, "match", name), f"rule {number} match.{name}"
        if name in ID_KEYS:
            return self.checked(ID_CHECKS[name], value, path, key)
        if name not in MATCH_KEYS:
            self.refuse(path, key, f"unknown key {shown(name)}{_suggestion(name, MATCH_KEYS)}; "
                                   f"a match takes {', '.join(MATCH_KEYS)}")
        elif not isinstance(value, str):
            self.refuse(path, key, f"must be text, not {shown(value)}")
        elif name in NAME_KEYS:
            exists = self.names.user_exists if name == "user" else self.names.group_exists
            if not value or not exists(value):
                self.refuse(path, key, f"no {name} named {shown(value)} on this system, so the "
                                       f"rule would match nothing")
        elif len(value) > TEXT_KEYS[name] and not WILDCARD.search(value):
            self.refuse(path, key, f"{shown(value)} is longer than any {name} a client can "
                                   f"report ({TEXT_KEYS[name]} characters), so the rule would "
                                   "match nothing")
        return value


def _syntax_line(error: Exception) -> tuple[int | None, str]:
    """The line tomllib names in its message, and the message without it."""
    text = str(error)
    found = re.search(r"\s*\(at line (\d+), column (\d+)\)", text)
    if found is None:
        return None, text
    return int(found[1]), f"{text[:found.start()]} at column {found[2]}"


def _rule_table_problem(text: str, line: int | None, message: str) -> Problem | None:
    """The hint at the `[rule]` header, where TOML refuses a file for having both kinds."""
    single = SINGLE_RULE_HEADER.search(text)
    if single is None or RULES_HEADER.search(text) is None:
        return None
    where = f" on line {line}" if line else ""
    return Problem(text.count("\n", 0, single.start()) + 1, "rule",
                   f"{RULE_TABLE_HINT} (TOML: {message}{where})")


def parse(text: str, path: str, names: Names = Names()) -> Config:
    """The Config that `text` (the file at `path`) says, or ConfigError."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line, message = _syntax_line(exc)
        raise ConfigError(path, [_rule_table_problem(text, line, message) or
                                 Problem(line, "", f"not valid TOML: {message}")]) from None
    except RecursionError:  # arrays or inline tables nested past the parser's own stack
        raise ConfigError(path, [Problem(None, "", "not valid TOML: arrays or tables nested "
                                                   "too deeply")]) from None
    reader = _Reader(text, path, names)
    config = reader.config(data)
    if reader.problems:
        raise ConfigError(path, reader.problems, reader.unlisted)
    return config
