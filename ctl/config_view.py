"""What `gemsharectl config check` prints: the settings and rules a config file gives, or its
problems."""

from __future__ import annotations

import json

from rich.console import Group
from rich.table import Table
from rich.text import Text

from gemshare_nvs.config.parsing import TERM_CHECKS, Config, ConfigError

from .render import MISSING, human_bytes

# The header of each term's column; a term missing here is headed by its own name, so that a
# term added to the file format shows before anyone names it.
TERM_HEADERS = {"weight": "Weight", "gpu_limit": "GPU limit", "memory_limit": "Memory limit",
                "sm_share": "SM share", "mps": "MPS", "mps_priority": "MPS priority"}


def _value(value) -> str:
    """A value as the file spells it: booleans and labels (modes, priorities) in TOML's words,
    not Python's."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "true" if value else "false"
    label = getattr(value, "label", None)  # Mode, MpsPriority
    if isinstance(label, str):
        return label
    return f"{value:g}" if isinstance(value, float) else str(value)


def _term(key: str, value) -> str:
    if value is None:
        return MISSING
    if key == "memory_limit":
        return human_bytes(value)
    if key == "sm_share":
        return f"{value}%"
    return _value(value)


def rules_table(config: Config) -> Table:
    """One row per rule, with a column for each term that some rule gives."""
    given = {key for rule in config.rules for key, _ in rule.values}
    terms = [key for key in TERM_CHECKS if key in given]
    table = Table(title="Rules (the first that matches a client gives its terms)",
                  title_justify="left")
    for column in ("Rule", "Line", "Match (all must hold)", *(TERM_HEADERS.get(key, key)
                                                              for key in terms)):
        table.add_column(column)
    for rule in config.rules:
        values = dict(rule.values)
        table.add_row(str(rule.number), _value(rule.line),
                      ", ".join(f"{key} = {json.dumps(value)}" for key, value in rule.match),
                      *(_term(key, values.get(key)) for key in terms))
    return table


def config_view(config: Config) -> Group:
    parts = [Text(f"{config.path}: valid", style="bold green")]
    if config.settings:
        settings = Text("Settings, over the command line's (gemsharectl's win over these):")
        for name, value in config.settings.items():
            settings.append(f"\n  {name} = {_value(value)}")
            settings.append(f"  (line {_value(config.setting_lines.get(name))})", style="dim")
        parts.append(settings)
    else:
        parts.append(Text("No settings: the command line's apply.", style="dim"))
    if config.rules:
        parts.append(rules_table(config))
    else:
        parts.append(Text("No rules: every client has weight 1 and no limits.", style="dim"))
    return Group(*parts)


def errors_view(error: ConfigError) -> Text:
    text = Text(f"{error.path}: {error.words()}; the scheduler "
                "would refuse this file as a whole\n", style="bold red")
    text.append("\n".join(error.lines()))
    return text
