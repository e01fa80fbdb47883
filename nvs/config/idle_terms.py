"""Terms and settings that do nothing where they are given: a file with them is valid and runs as
written, but most likely not as meant, so `gemsharectl config check` and the scheduler's log
(at start and at each reload) warn of each, as they do of a rule that can never match.

- In a rule: `sm_share` or `mps_priority` beside `mps = false`, which keeps the rule's programs
  out of MPS, where alone those two apply.
- Given the settings: with MPS off (`mps = false`), every rule's `sm_share`, `mps_priority` and
  `mps`, and `mps_pipe_directory`; with MPS on, MPS itself when no program can go through it:
  `anti_thrash = "on"` keeps one program on a GPU at a time, or a rule that every program
  reaches (its match holds for all, and each rule before it says `mps = false` too) says
  `mps = false`; with `anti_thrash = "off"`, which hands out no lock, every rule's `weight` and
  `gpu_limit`.

`config check` knows only the file's own settings (a setting it does not give is the command
line's, unknown there); the scheduler knows the settings in force, from every layer.
"""

from __future__ import annotations

from ..core.model.text import escaped
from ..protocol import Mode
from .parsing import Config
from .rules import Rule, holds_for_all, located

THROUGH_MPS = ("sm_share", "mps_priority")  # terms that apply only through MPS
MPS_TERMS = (*THROUGH_MPS, "mps")
LOCK_TERMS = ("weight", "gpu_limit")  # shares of the lock


def idle_terms(config: Config | None, values: dict, sources: dict) -> list[str]:
    """One line for each term or setting that does nothing, given `config`'s rules and the
    settings `values` (name -> value; a setting missing is not known), which `sources` say
    where they come from."""
    rules = config.rules if config is not None else ()
    path = config.path if config is not None else ""

    def setting(name: str) -> str:
        """A setting as the file writes it, and where it comes from."""
        value = values[name]
        shown = value.label if isinstance(value, Mode) else value
        shown = f'"{escaped(shown)}"' if isinstance(shown, str) else str(shown).lower()
        return f"{name} = {shown} ({_from(sources.get(name, 'default'))})"

    mode = values.get("anti_thrash")
    found = []
    if values.get("mps") is not False:  # else the next lines name every MPS term
        found += [_mps_false_rule(path, rule) for rule in rules
                  if dict(rule.values).get("mps") is False and _given(rule, THROUGH_MPS)]
    if values.get("mps") is False:
        no_mps = f"the scheduler runs no MPS: {setting('mps')}"
        found += _rules_given(path, rules, MPS_TERMS, no_mps)
        if values.get("mps_pipe_directory") is not None:
            found.append(f"{setting('mps_pipe_directory')} does nothing: {no_mps}")
    elif values.get("mps") is True and mode is Mode.ON:
        found.append(f"{setting('mps')} puts no program through MPS: {setting('anti_thrash')} "
                     "keeps one program on a GPU at a time; use anti_thrash \"auto\" (or "
                     "\"off\") to share GPUs through MPS")
    elif values.get("mps") is True and (rule := _keeps_everyone_out(rules)) is not None:
        found.append(f"{setting('mps')} puts no program through MPS: {located(path, rule.line)}: "
                     f"rule {rule.number} matches every program the rules before it leave, and "
                     "says mps = false, as they all do")
    if mode is Mode.OFF:
        found += _rules_given(path, rules, LOCK_TERMS,
                              f"{setting('anti_thrash')} hands out no lock")
    return found


def _from(source: str) -> str:
    """Where a setting comes from (layers.py's words), as a parenthesis says it."""
    if source.startswith("config (") and source.endswith(")"):
        return "at " + source[len("config ("):-1]
    return {"command line": "on the command line", "default": "by default",
            "gemsharectl": "set with gemsharectl"}.get(source, source)


def _keeps_everyone_out(rules) -> Rule | None:
    """The first rule that matches every program, when it and each rule before it say
    `mps = false`; else None."""
    for rule in rules:
        if dict(rule.values).get("mps") is not False:
            return None
        if all(holds_for_all(key, value) for key, value in rule.match):
            return rule
    return None


def _given(rule: Rule, names) -> list[str]:
    terms = dict(rule.values)
    return [name for name in names if name in terms]


def _mps_false_rule(path: str, rule: Rule) -> str:
    idle = _given(rule, THROUGH_MPS)
    return (f"{located(path, rule.line)}: rule {rule.number}: {_and(idle)} "
            f"{'does' if len(idle) == 1 else 'do'} nothing: the rule's mps = false keeps its "
            "programs out of MPS, where alone they apply; remove one or the other")


def _rules_given(path: str, rules, names, because: str) -> list[str]:
    return [f"{located(path, rule.line)}: rule {rule.number}: {_and(idle)} "
            f"{'does' if len(idle) == 1 else 'do'} nothing: {because}"
            for rule in rules if (idle := _given(rule, names))]


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
