"""`gemsharectl --help` documents every option, the environment and the exit statuses."""

from __future__ import annotations

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
