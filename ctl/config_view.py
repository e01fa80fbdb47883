"""What `gemsharectl config check` prints: the settings and rules a config file gives, or its
problems."""

from __future__ import annotations

import json

from rich.console import Group
from rich.table import Table
from rich.text import Text

from gemshare_nvs.config.parsing import Config, ConfigError
from gemshare_nvs.protocol import Mode

from .render import MISSING, human_bytes


def _value(value) -> str:
    if value is None:
        return MISSING
    if isinstance(value, Mode):
        return value.label
    return f"{value:g}" if isinstance(value, float) else str(value)


def _term(key: str, value) -> str:
    return human_bytes(value) if key == "memory_limit" else _value(value)


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
        rules = Table(title="Rules (the first that matches a client gives its terms)",
                      title_justify="left")
        for column in ("Rule", "Line", "Match (all must hold)", "Weight", "GPU limit",
                       "Memory limit"):
            rules.add_column(column)
        for rule in config.rules:
            values = dict(rule.values)
            rules.add_row(str(rule.number), _value(rule.line),
                          ", ".join(f"{key} = {json.dumps(value)}" for key, value in rule.match),
                          *(_term(key, values.get(key))
                            for key in ("weight", "gpu_limit", "memory_limit")))
        parts.append(rules)
    else:
        parts.append(Text("No rules: every client has weight 1 and no limits.", style="dim"))
    return Group(*parts)


def errors_view(error: ConfigError) -> Text:
    text = Text(f"{error.path}: {error.words()}; the scheduler "
                "would refuse this file as a whole\n", style="bold red")
    text.append("\n".join(error.lines()))
    return text
