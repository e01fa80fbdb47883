"""The commands an install gives: pyproject.toml's console scripts, and gemshare-scheduler, which
a wheel carries as a launcher and a script of its own (setup.py) instead of a console script."""

from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
CONSOLE_SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
WHEEL_SCRIPTS = ("gemshare-scheduler",)
COMMANDS = frozenset({*CONSOLE_SCRIPTS, *WHEEL_SCRIPTS})
