"""Both commands offer shell completion: the script to install, and the words it completes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Typer otherwise asks shellingham which shell runs the test; with this set, the shell is named.
SHELL_NAMED = {"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}


def completions(run, variable: str, words: str) -> list[str]:
    """What bash completion would offer after `words` (the last one being completed)."""
    result = run(env={variable: "complete_bash", "COMP_WORDS": words,
                      "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))})
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_gemsharectl_prints_its_bash_completion_script(ctl):
    result = ctl("--show-completion", "bash", env=SHELL_NAMED)
    assert result.returncode == 0, result.stderr
    assert "_GEMSHARECTL_COMPLETE=complete_bash" in result.stdout
    assert "complete -o default -F _gemsharectl_completion gemsharectl" in result.stdout


def test_the_scheduler_prints_its_bash_completion_script(run_scheduler):
    result = run_scheduler("--show-completion", "bash", env=SHELL_NAMED)
    assert result.returncode == 0, result.stderr
    assert "_GEMSHARE_SCHEDULER_COMPLETE=complete_bash" in result.stdout
    assert "-F _gemshare_scheduler_completion gemshare-scheduler" in result.stdout


def test_gemsharectl_completes_commands_and_options(ctl):
    assert completions(ctl, "_GEMSHARECTL_COMPLETE", "gemsharectl st") == ["status"]
    assert "--json" in completions(ctl, "_GEMSHARECTL_COMPLETE", "gemsharectl status --")


def test_gemsharectl_completes_every_choice(ctl):
    variable = "_GEMSHARECTL_COMPLETE"
    assert completions(ctl, variable, "gemsharectl --anti-thrash ") == ["on", "off", "auto"]
    assert completions(ctl, variable, "gemsharectl --anti-thrash o") == ["on", "off"]
    assert completions(ctl, variable, "gemsharectl client 42 --gpu-limit ") == ["none"]
    assert completions(ctl, variable, "gemsharectl client 42 --memory-limit n") == ["none"]
    assert completions(ctl, variable, "gemsharectl client 42 --memory-limit 8") == []
    # The options taken after a command are offered there too.
    assert {"--socket", "--timeout"} <= set(completions(ctl, variable, "gemsharectl status --"))


def test_the_device_plugin_completes_its_options():
    result = subprocess.run(
        [sys.executable, "-m", "gemshare_plugin"], capture_output=True, text=True, timeout=60,
        env={**os.environ, "_GEMSHARE_DEVICE_PLUGIN_COMPLETE": "complete_bash",
             "COMP_WORDS": "gemshare-device-plugin --s", "COMP_CWORD": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["--slots", "--scheduler-socket", "--show-completion"]


def test_the_scheduler_completes_options_and_modes(run_scheduler):
    variable = "_GEMSHARE_SCHEDULER_COMPLETE"
    assert completions(run_scheduler, variable, "gemshare-scheduler --max") == [
        "--max-clients", "--max-clients-per-user"]
    assert completions(run_scheduler, variable, "gemshare-scheduler --anti-thrash ") == [
        "on", "off", "auto"]


@pytest.mark.parametrize("option", ["--install-completion", "--show-completion"])
def test_both_commands_list_the_completion_options_in_their_help(ctl, run_scheduler, option):
    assert option in ctl("--help").stdout
    assert option in run_scheduler("--help").stdout
