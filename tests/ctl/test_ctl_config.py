"""gemsharectl's configuration commands: `config check` (no scheduler needed), `config reload`,
`client PID` with its options, `--set-min-slice-ms` and `--reset-settings`, against real
schedulers."""

from __future__ import annotations

import json
import os

import pytest
from ctl_helpers import wait_for_status

from gemshare_ctl.errors import ExitCode

GOOD = """\
tq = 30
anti_thrash = "on"

[[rule]]
match = { label = "notebook" }
weight = 2

[[rule]]
match = { process = "trainer*" }
memory_limit = "16GiB"
gpu_limit = 0.5
"""


def test_config_check_prints_what_a_good_file_gives(ctl, tmp_path):
    path = tmp_path / "gemshare.toml"
    path.write_text(GOOD)
    result = ctl("config", "check", str(path))
    assert result.returncode == 0, result.stderr
    assert f"{path}: valid" in result.stdout
    assert "tq = 30" in result.stdout and "(line 1)" in result.stdout
    rule = next(line for line in result.stdout.splitlines() if 'process = "trainer*"' in line)
    assert "0.5" in rule and "16.0 GiB" in rule and " 8 " in rule  # its line


MPS_TERMS = """\
mps = true

[[rule]]
match = { label = "shared" }
sm_share = 30

[[rule]]
match = { label = "trainer" }
mps = false

[[rule]]
match = { label = "batch" }
mps_priority = "low"
"""


def test_config_check_shows_the_mps_terms_in_toml_words(ctl, tmp_path):
    path = tmp_path / "gemshare.toml"
    path.write_text(MPS_TERMS)
    result = ctl("config", "check", str(path))
    assert result.returncode == 0, result.stderr
    assert "mps = true  (line 1)" in result.stdout and "True" not in result.stdout
    header = next(line for line in result.stdout.splitlines() if "Match" in line)
    assert "SM share" in header and "MPS priority" in header
    assert "Weight" not in header  # no rule gives one: no column of dashes

    def row(label: str) -> list[str]:
        line = next(line for line in result.stdout.splitlines() if f'label = "{label}"' in line)
        return [cell.strip() for cell in line.strip("│┃ ").split("│")]
    assert row("shared")[3:] == ["30%", "-", "-"]
    assert row("trainer")[3:] == ["-", "false", "-"]
    assert row("batch")[3:] == ["-", "-", "low"]


def test_config_check_has_a_column_for_every_term_a_rule_may_give(tmp_path):
    """Each term the file format knows, given by a rule of its own, shows in its own column:
    a term added later cannot hide as the MPS terms once did."""
    from rich.console import Console

    from gemshare_ctl.config_view import rules_table
    from gemshare_nvs.config import file as config_file
    from gemshare_nvs.config.parsing import TERM_CHECKS
    examples = {"weight": "2", "gpu_limit": "0.5", "memory_limit": '"1GiB"', "sm_share": "10",
                "mps": "false", "mps_priority": '"low"'}
    assert examples.keys() == TERM_CHECKS.keys()
    path = tmp_path / "gemshare.toml"
    path.write_text("".join(f'[[rule]]\nmatch = {{ label = "{key}" }}\n{key} = {value}\n'
                            for key, value in examples.items()))
    table = rules_table(config_file.read(path))
    assert len(table.columns) == 3 + len(TERM_CHECKS)
    console = Console(width=300, record=True)
    console.print(table)
    lines = console.export_text().splitlines()
    for number, key in enumerate(TERM_CHECKS):
        row = next(line for line in lines if f'label = "{key}"' in line)
        cells = [cell.strip() for cell in row.strip("│ ").split("│")][3:]
        given = [index for index, cell in enumerate(cells) if cell != "-"]
        assert given == [number], (key, cells)


def test_config_check_warns_of_a_rule_that_can_never_match_but_passes_the_file(ctl, tmp_path):
    path = tmp_path / "gemshare.toml"
    path.write_text(GOOD + '\n[[rule]]\nmatch = { process = "trainer-big" }\nweight = 4\n')
    result = ctl("config", "check", str(path))
    assert result.returncode == 0, result.stderr
    assert f"{path}: valid" in result.stdout
    assert (f"warning: {path}:13: rule 3 (line 13) can never match: rule 2 (line 8) comes "
            "first and matches every client it would") in result.stderr
    path.write_text(GOOD)
    assert "warning" not in ctl("config", "check", str(path)).stderr


def test_config_check_warns_of_terms_that_do_nothing_but_passes_the_file(ctl, tmp_path):
    path = tmp_path / "gemshare.toml"
    path.write_text(GOOD + '\n[[rule]]\nmatch = { uid = 7 }\nmps = false\nsm_share = 30\n')
    result = ctl("config", "check", str(path))
    assert result.returncode == 0, result.stderr
    assert (f"warning: {path}:13: rule 3: sm_share does nothing: the rule's mps = false keeps "
            "its programs out of MPS") in result.stderr
    path.write_text(GOOD.replace('anti_thrash = "on"', 'anti_thrash = "on"\nmps = true'))
    result = ctl("config", "check", str(path))
    assert (f"warning: mps = true (at {path}:3) puts no program through MPS: anti_thrash = "
            f'"on" (at {path}:2)') in result.stderr


def test_config_check_lists_every_problem_with_its_line_and_fails(ctl, tmp_path):
    path = tmp_path / "gemshare.toml"
    path.write_text(GOOD.replace("weight = 2", "weight = 0").replace("0.5", "5"))
    result = ctl("config", "check", str(path))
    assert result.returncode == 1 and result.stdout == ""
    assert "2 problems" in result.stderr
    assert f"{path}:6: rule 1 weight: weight must be a number greater than 0" in result.stderr
    assert f"{path}:11: rule 2 gpu_limit: gpu_limit must be a number" in result.stderr


def test_config_check_of_a_missing_file_fails(ctl, tmp_path):
    result = ctl("config", "check", str(tmp_path / "none.toml"))
    assert result.returncode == 1 and "no such file" in result.stderr


def test_config_reload_reports_taken_and_refused_files(ctl, scheduler_factory, short_tmp_dirs):
    directory = short_tmp_dirs()
    config = directory / "gemshare.toml"
    config.write_text("tq = 20\n")
    scheduler = scheduler_factory(directory=directory)
    socket = str(scheduler.socket)
    config.write_text("tq = 21\n")
    result = ctl("--socket", socket, "config", "reload")
    assert result.returncode == 0, result.stderr
    assert f"reloaded {config}, 0 rules" in result.stdout
    config.write_text("tq = -1\n")
    result = ctl("--socket", socket, "config", "reload")
    assert result.returncode == ExitCode.INVALID
    assert f"{config}:1: tq: tq must be a whole number" in result.stderr
    status = json.loads(ctl("--socket", socket, "status", "--json").stdout)
    assert status["tq"] == 21
    table = ctl("--socket", socket, "status").stdout
    assert "TQ 21 s (config line 1)" in table and "Config not reloaded: 1 problem" in table


def test_client_weight_is_applied_shown_and_reset(ctl, scheduler, stand_in_client):
    trainer = stand_in_client(scheduler.socket, "trainer")
    socket, pid = str(scheduler.socket), str(os.getpid())
    result = ctl("--socket", socket, "client", pid, "--weight", "2", "--memory-limit", "8GiB")
    assert result.returncode == 0, result.stderr
    assert "weight: 2 (gemsharectl)" in result.stdout
    assert "memory_limit: 8.0 GiB (gemsharectl)" in result.stdout
    assert "gpu_limit: none (default)" in result.stdout
    lasts = "until the client disconnects or the scheduler restarts"
    assert f"Terms from gemsharectl last {lasts}." in result.stdout
    status = wait_for_status(scheduler.socket, lambda s: s["clients"][0]["weight"] == 2)
    assert status["clients"][0]["id"] == trainer.id
    assert status["clients"][0]["overrides"]["lasts"] == lasts
    table = ctl("--socket", socket, "status").stdout
    row = next(line for line in table.splitlines() if "trainer" in line)
    assert "8.0 GiB" in row and "gemsharectl" in row
    assert f"Terms from gemsharectl last {lasts}." in table
    result = ctl("--socket", socket, "client", pid, "--reset")
    assert result.returncode == 0 and "weight: 1 (default)" in result.stdout


@pytest.mark.parametrize("args, words", [
    (["--weight", "0"], "weight must be a number greater than 0"),
    (["--weight", "heavy"], "not 'heavy'"),
    (["--gpu-limit", "1.5"], "gpu_limit must be a number greater than 0 and at most 1"),
    (["--memory-limit", "8 gigs"], "memory_limit must be a size such as 16GiB"),
])
def test_client_values_are_refused_before_sending(ctl, tmp_path, args, words):
    result = ctl("--socket", str(tmp_path / "nobody-listens.sock"), "client", "42", *args)
    assert result.returncode == ExitCode.INVALID and words in result.stderr


def test_client_of_an_unknown_pid_says_so(ctl, scheduler):
    result = ctl("--socket", str(scheduler.socket), "client", "999999", "--weight", "2")
    assert result.returncode == ExitCode.INVALID
    assert "no client of the scheduler has pid 999999" in result.stderr
    result = ctl("--socket", str(scheduler.socket), "client", "999999")
    assert result.returncode == ExitCode.INVALID and "has pid 999999" in result.stderr


def test_client_is_for_the_control_group_only(scheduler, stand_in_client, ctl_as_nobody):
    stand_in_client(scheduler.socket, "trainer")
    status, output = ctl_as_nobody("--socket", str(scheduler.socket), "client",
                                   str(os.getpid()), "--weight", "2")
    assert status == ExitCode.PERMISSION and "permission denied" in output, output


def test_min_slice_is_set_and_reset_settings_drops_it(ctl, scheduler):
    socket = str(scheduler.socket)
    result = ctl("--socket", socket, "--set-min-slice-ms", "120", "--set-tq", "9")
    assert result.returncode == 0, result.stderr
    assert "TQ 9 s" in result.stdout and "min slice 120 ms" in result.stdout
    table = ctl("--socket", socket, "status").stdout
    assert "TQ 9 s (gemsharectl)" in table and "min slice 120 ms (gemsharectl)" in table
    result = ctl("--socket", socket, "--reset-settings")
    assert result.returncode == 0 and "dropped first" in result.stdout
    status = json.loads(ctl("--socket", socket, "status", "--json").stdout)
    assert (status["tq"], status["min_slice_ms"]) == (30, 300)
    assert set(status["settings_from"].values()) == {"default"}
