"""`gemsharectl --help` documents every option, the environment and the exit statuses."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rich.text import Text

from gemshare_ctl import app
from gemshare_ctl.errors import ExitCode


def test_top_level_help_documents_everything(ctl):
    result = ctl("--help")
    assert result.returncode == 0, result.stderr
    for needle in ("--set-tq", "--anti-thrash", "on|off|auto", "1 to 86400", "--socket",
                   "--timeout", "--version", "status", "GEMSHARE_SOCKET",
                   "/var/run/gemshare/scheduler.sock", "Exit status"):
        assert needle in result.stdout, needle
    for code in ExitCode:
        assert f"  {code.value:d}  " in result.stdout, f"exit status {code.value} undocumented"


def test_status_help_documents_json_and_columns(ctl):
    result = ctl("status", "--help")
    assert result.returncode == 0, result.stderr
    for needle in ("--json", "holding", "waiting", "idle", "allocated"):
        assert needle in result.stdout, needle


def test_version(ctl):
    result = ctl("--version")
    assert result.returncode == 0 and result.stdout.startswith("gemsharectl "), result


# Every command's help, as a user reaches it.
HELPS = [["gemsharectl", "--help"], *(["gemsharectl", *command, "--help"] for command in (
    ["status"], ["top"], ["client"], ["config"], ["config", "check"], ["config", "reload"],
    ["library-path"])), ["gemshare-scheduler", "--help"], ["gemshare-device-plugin", "--help"]]
PROGRAMS = {"gemsharectl": "gemshare_ctl", "gemshare-scheduler": "gemshare_nvs.daemon",
            "gemshare-device-plugin": "gemshare_plugin"}


def help_text(command: list[str], columns: int) -> str:
    program, *args = command
    result = subprocess.run([sys.executable, "-m", PROGRAMS[program], *args], text=True,
                            capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
                            env={**os.environ, "COLUMNS": str(columns)})
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("command", [*HELPS, ["gemsharectl", "doctor", "--help"]], ids=" ".join)
def test_help_fits_80_columns_with_nothing_cut(command):
    shown = help_text(command, 80)
    too_long = [line for line in shown.splitlines() if len(line) > 80]
    assert not too_long, too_long
    assert "…" not in shown, shown  # rich's mark for a name or a word cut short


def test_the_epilog_keeps_its_lines_at_80_columns():
    """Each line of Examples, Environment and Exit status is shown whole, not wrapped."""
    shown = [line.strip() for line in help_text(["gemsharectl", "--help"], 80).splitlines()]
    for line in Text.from_markup(app.EPILOG).plain.splitlines():
        assert line.strip() in shown, line


@pytest.mark.parametrize("command", HELPS, ids=" ".join)
def test_flags_are_plain_flags_in_help(command):
    """Typer's releases have shown flags as values (`--json <bool>`) or unset options with
    `[default: None]`; in the releases pyproject.toml allows, neither shows."""
    program, *args = command
    result = subprocess.run([sys.executable, "-m", PROGRAMS[program], *args], text=True,
                            capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
                            env={**os.environ, "COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    for wrong in ("<bool>", "BOOLEAN", "[default: None]", "default: False"):
        assert wrong not in result.stdout, (wrong, result.stdout)


def test_settings_options_are_named_as_the_schedulers_and_keep_their_old_names(ctl):
    help_text = ctl("--help").stdout
    for name in ("--tq", "--set-tq", "--anti-thrash", "--min-slice-ms", "--set-min-slice-ms"):
        assert name in help_text, name
