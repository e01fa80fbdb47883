"""gemshare-scheduler's options: bad values are refused with a message before anything starts."""

import os
import subprocess
import sys

import pytest
from terminal_run import stderr_on_terminal

from gemshare_ctl import options
from gemshare_nvs import protocol as p
from gemshare_nvs.config import settings
from gemshare_nvs.config.settings import MIN_SLICE_MS, TQ
from gemshare_nvs.service import command_line


@pytest.mark.parametrize("args, words", [
    (["--tq", "0"], "from 1 to 86400"),
    (["--tq", "-3"], "from 1 to 86400"),
    (["--tq", "86401"], "from 1 to 86400"),
    (["--tq", "abc"], "tq must be a whole number of seconds from 1 to 86400, not 'abc'"),
    (["--tq", "1.5"], "tq must be a whole number of seconds from 1 to 86400, not '1.5'"),
    (["--anti-thrash", "maybe"], "must be one of on, off, auto, not 'maybe'"),
    (["--grace-ms", "0"], "grace must be"),
    (["--max-clients", "0"], "max clients must be"),
    (["--max-clients-per-user", "0"], "max clients per user must be"),
    (["--max-clients-per-user", "x"], "max clients per user must be a whole number from 1"),
    (["--context-reserve-mib", "-1"], "context reserve must be a whole number of MiB from 0"),
    (["--context-reserve-mib", "1048577"], "from 0 to 1048576"),
    (["--context-reserve-mib", "0.5"], "context reserve must be a whole number of MiB"),
    (["--capacity-mib", "0"], "capacity must be a whole number of MiB from 1 to 1048576"),
    (["--capacity-mib", "2GiB"], "capacity must be a whole number of MiB from 1 to 1048576"),
    (["--staging-max-mib", "-1"], "staging memory must be a whole number of MiB from 0"),
    (["--staging-max-mib", "8GiB"], "staging memory must be a whole number of MiB from 0"),
    (["--control-group", " "], "--control-group must name a group"),
    (["--metrics"], "'--metrics' requires an argument"),
    (["--bogus"], "No such option: --bogus"),
])
def test_bad_option_is_refused_with_a_message(short_tmp_dirs, run_scheduler, args, words):
    path = short_tmp_dirs() / "never.sock"
    result = run_scheduler("--socket", str(path), *args)
    assert result.returncode == 2
    # Off a terminal one plain line, as gemsharectl's: a journal's grep finds all of it.
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("gemshare-scheduler: ")
    assert result.stderr.endswith("; see 'gemshare-scheduler --help'\n")
    assert words in result.stderr
    assert not path.exists()  # refused before touching the socket


def test_a_bad_option_on_a_terminal_gets_clicks_usage_lines(short_tmp_dirs):
    """On a terminal the usage and the pointer to the help come first, as click writes them."""
    status, shown = stderr_on_terminal(
        [sys.executable, "-m", "gemshare_nvs.daemon", "--socket",
         str(short_tmp_dirs() / "never.sock"), "--tq", "0"])
    assert status == 2
    lines = shown.splitlines()
    assert lines[0] == "Usage: gemshare-scheduler [OPTIONS]", lines
    assert "from 1 to 86400" in lines[-1], lines


def test_a_refused_value_is_named_with_its_option(short_tmp_dirs, run_scheduler):
    result = run_scheduler("--socket", str(short_tmp_dirs() / "never.sock"), "--tq", "1.5")
    assert ("Invalid value for '--tq': tq must be a whole number of seconds from 1 to 86400, "
            "not '1.5'") in result.stderr


def test_the_scheduler_and_gemsharectl_refuse_a_value_in_the_same_words(short_tmp_dirs,
                                                                         run_scheduler):
    """docs/config.md promises one wording wherever a value is given."""
    for number, option, value in ((TQ, "--tq", "1.5"), (MIN_SLICE_MS, "--min-slice-ms", "-1")):
        result = run_scheduler("--socket", str(short_tmp_dirs() / "never.sock"), option, value)
        with pytest.raises(Exception) as refused:
            options.whole(number, "")(value)
        words = str(refused.value.message).split(" (for example")[0]
        assert words in result.stderr


@pytest.mark.parametrize("option, number", [
    ("--tq", "TQ"), ("--min-slice-ms", "MIN_SLICE_MS"), ("--grace-ms", "GRACE_MS"),
    ("--context-reserve-mib", "CONTEXT_RESERVE_MIB"), ("--capacity-mib", "CAPACITY_MIB"),
    ("--staging-max-mib", "STAGING_MAX_MIB"), ("--max-clients", "MAX_CLIENTS"), ("--max-clients-per-user", "MAX_CLIENTS_PER_USER")])
def test_help_gives_each_numbers_range(run_scheduler, option, number):
    span = getattr(settings, number).span
    help_text = run_scheduler("--help").stdout
    # The option's entry: its line and the lines that carry on its text, words rejoined.
    entry = help_text.split(f"\n  {option} ", 1)[1].split("\n  --", 1)[0]
    assert span in " ".join(entry.split()), entry


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_documents_every_option(run_scheduler, flag):
    result = run_scheduler(flag)
    assert result.returncode == 0
    for option in (*sorted(command_line.option_names()), "GEMSHARE_SOCKET", "on|off|auto"):
        assert option in result.stdout


def test_help_opens_with_every_way_it_shares(run_scheduler):
    opening = run_scheduler("--help").stdout.split("Options:", 1)[0]
    words = " ".join(opening.split())
    for mode in p.Mode:
        assert f"{'--anti-thrash ' if mode is p.Mode.ON else ''}{mode.label} " in words, words
    assert "--mps" in words and "weight" in words and "exclusive" not in words


def test_parse_gives_the_settings_and_refuses_what_run_would(monkeypatch):
    monkeypatch.delenv("GEMSHARE_SOCKET", raising=False)
    settings = command_line.parse(["--tq=45", "--anti-thrash", "auto", "--metrics", "[::1]:0",
                                   "--max-clients", "8"])
    assert (settings.tq, settings.mode, settings.metrics, settings.max_clients) == (
        45, p.Mode.AUTO, ("::1", 0), 8)
    assert settings.given == {"tq", "anti_thrash"}
    assert str(settings.socket) == "/var/run/gemshare/scheduler.sock"
    for args, words in ((["--tq", "0"], "from 1 to 86400"), (["--bogus"], "No such option")):
        with pytest.raises(Exception, match=words) as refused:
            command_line.parse(args)
        assert refused.value.exit_code == 2


def test_options_reach_the_running_scheduler(scheduler_factory):
    running = scheduler_factory(tq=86400, anti_thrash="auto", grace_ms=1, max_clients=3,
                                context_reserve_mib=64, capacity_mib=3072, control_group="wheel",
                                debug=True)
    with running.connect() as client, running.connect() as control:
        client.send(p.Register(0, 0, "client"))
        assert isinstance(client.recv()[0], p.Registered)  # now device 0 shows in status
        status = control.request({"op": "status"})["status"]
    assert (status["tq"], status["anti_thrash"], status["grace_ms"], status["max_clients"],
            status["control_group"]) == (86400, "auto", 1, 3, "wheel")
    device = status["devices"][0]
    assert device["context_reserve_bytes"] == 64 << 20
    # This client reported no total and the test has no NVML: the limit is the capacity.
    assert (device["capacity_bytes"], device["capacity_source"]) == (3072 << 20, "limit")
    assert "DEBUG" in running.log()  # --debug logs connections opening


def test_gemshare_debug_variable_turns_on_debug_logging(scheduler_factory):
    running = scheduler_factory(env={"GEMSHARE_DEBUG": "1"})
    with running.connect() as control:
        control.request({"op": "status"})
    running.stop()
    assert "DEBUG connection" in running.log()


def test_version_is_the_package_one_and_the_same_as_gemsharectls(run_scheduler):
    import subprocess
    import sys
    from importlib import metadata

    result = run_scheduler("--version")
    assert result.returncode == 0
    assert result.stdout == f"gemshare-scheduler {metadata.version('gemshare')}\n"
    ctl = subprocess.run([sys.executable, "-m", "gemshare_ctl", "--version"],
                         capture_output=True, text=True, timeout=60)
    assert ctl.stdout.split()[1:] == result.stdout.split()[1:]


def test_version_without_package_metadata_comes_from_the_source_tree(monkeypatch):
    from importlib import metadata

    from gemshare_nvs import version

    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    tomllib = pytest.importorskip("tomllib")
    pyproject = version.Path(version.__file__).resolve().parent.parent / "pyproject.toml"
    assert version.version() == tomllib.loads(pyproject.read_text())["project"]["version"]
    monkeypatch.setattr(version, "_source_tree_version", lambda: None)
    assert version.version() == version.UNKNOWN
