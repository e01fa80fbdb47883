"""gemsharectl's failures: one clear line, the documented exit status, no traceback, no change."""

from __future__ import annotations

import json
import os
import signal
import sys

import pytest
from terminal_run import stderr_on_terminal

from gemshare_ctl import client
from gemshare_ctl.errors import CtlError, ExitCode


def assert_clean_failure(result, status: ExitCode, *needles: str) -> None:
    assert result.returncode == status, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def settings_of(ctl, scheduler) -> tuple:
    status = json.loads(ctl("--socket", str(scheduler.socket), "status", "--json").stdout)
    return status["tq"], status["anti_thrash"]


@pytest.mark.parametrize("args", [["status"], ["--set-tq", "30"], ["--anti-thrash", "off"]])
def test_no_scheduler_names_the_socket(ctl, tmp_path, args):
    missing = tmp_path / "[bold]x[/bold]" / "scheduler.sock"  # brackets must print as written
    result = ctl(*args, env={"GEMSHARE_SOCKET": str(missing)})
    assert_clean_failure(result, ExitCode.UNREACHABLE, str(missing), "no gemshare-scheduler")


def test_dead_scheduler_socket_file_is_reported_as_not_running(ctl, scheduler_factory):
    scheduler = scheduler_factory()
    scheduler.process.kill()  # SIGKILL leaves the socket file behind, refusing connections
    scheduler.process.wait(10)
    assert scheduler.socket.exists()
    result = ctl("--socket", str(scheduler.socket), "status")
    assert_clean_failure(result, ExitCode.UNREACHABLE, str(scheduler.socket))


def test_unanswering_scheduler_times_out(ctl, scheduler):
    os.kill(scheduler.process.pid, signal.SIGSTOP)  # the kernel still accepts connections
    try:
        result = ctl("--socket", str(scheduler.socket), "--timeout", "0.5", "status")
    finally:
        os.kill(scheduler.process.pid, signal.SIGCONT)
    assert_clean_failure(result, ExitCode.UNREACHABLE, "did not answer within 0.5 s")


@pytest.mark.parametrize("value", ["0", "-1", "86401", "1.5", "30s", "abc", "", "1e3"])
def test_bad_tq_is_refused_before_sending(ctl, scheduler, value):
    result = ctl("--socket", str(scheduler.socket), "--set-tq", value, "--anti-thrash", "off")
    assert_clean_failure(result, ExitCode.INVALID, "--set-tq", "1 to 86400")
    assert settings_of(ctl, scheduler) == (30, "on")  # the valid mode was not applied either


def test_values_are_checked_before_connecting(ctl, tmp_path):
    result = ctl("--socket", str(tmp_path / "none.sock"), "--set-tq", "0")
    assert_clean_failure(result, ExitCode.INVALID, "--set-tq")


@pytest.mark.parametrize("value", ["maybe", "", "1"])
def test_bad_mode_is_refused_before_sending(ctl, scheduler, value):
    result = ctl("--socket", str(scheduler.socket), "--set-tq", "10", "--anti-thrash", value)
    assert_clean_failure(result, ExitCode.INVALID, "--anti-thrash", "on, off, auto")
    assert settings_of(ctl, scheduler) == (30, "on")


def test_scheduler_refusal_of_a_value_is_shown_with_invalid_status(scheduler):
    # The CLI checks values with the scheduler's own rules, so only a direct request shows how a
    # refusal from the scheduler itself is reported.
    with pytest.raises(CtlError) as refused:
        client.change_settings(scheduler.socket, 5.0, tq=0)
    assert refused.value.exit_code == ExitCode.INVALID
    assert str(scheduler.socket) in refused.value.message and "tq must be" in refused.value.message


def test_socket_path_too_long_for_unix_sockets(ctl):
    result = ctl("--socket", "/tmp/" + "x" * 110, "status")
    assert_clean_failure(result, ExitCode.INVALID, "at most 107", "--socket")


def test_bare_gemsharectl_shows_its_help(ctl):
    result = ctl()
    assert result.returncode == ExitCode.INVALID  # as click has it for a bare group
    assert "Usage: gemsharectl" in result.stdout and "--reset-settings" in result.stdout
    assert result.stderr == ""


def test_nothing_to_do_names_every_setting(ctl):
    result = ctl("--timeout", "5")
    assert_clean_failure(result, ExitCode.INVALID, "nothing to do")
    for option in ("--tq", "--anti-thrash", "--min-slice-ms", "--reset-settings"):
        assert option in result.stderr


@pytest.mark.parametrize("args, words", [
    (["--set-tq", "0"], "tq must be a whole number of seconds from 1 to 86400, not 0"),
    (["status", "--bogus"], "No such option: --bogus"),
    (["--anti-thrash", "sometimes"], "anti_thrash must be one of on, off, auto"),
])
def test_errors_into_a_pipe_are_one_plain_line(ctl, tmp_path, args, words):
    result = ctl("--socket", str(tmp_path / "none.sock"), *args, env={"COLUMNS": "40"})
    assert result.returncode == ExitCode.INVALID
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("gemsharectl: ")
    assert words in result.stderr and "╭" not in result.stderr and "\x1b" not in result.stderr


def test_the_min_slice_given_twice_under_its_two_names_is_refused(ctl, tmp_path):
    result = ctl("--socket", str(tmp_path / "none.sock"), "--min-slice-ms", "100",
                 "--set-min-slice-ms", "200")
    assert_clean_failure(result, ExitCode.INVALID, "--min-slice-ms and --set-min-slice-ms are "
                                                   "one option: give it once")


def test_a_mistyped_command_gets_its_suggestion_and_the_help_in_sentences(ctl):
    result = ctl("stauts")
    assert result.returncode == ExitCode.INVALID
    assert result.stderr == ("gemsharectl: No such command 'stauts'. Did you mean 'status'? "
                             "See 'gemsharectl -h'.\n")


def test_errors_on_a_terminal_keep_typers_box():
    status, shown = stderr_on_terminal([sys.executable, "-m", "gemshare_ctl", "--set-tq", "0"],
                                       env={**os.environ, "COLUMNS": "100"})
    assert status == ExitCode.INVALID
    assert "╭" in shown and "86400" in shown


def test_unprivileged_user_may_read_but_not_set(ctl, scheduler, ctl_as_nobody):
    status, output = ctl_as_nobody("--socket", str(scheduler.socket), "--set-tq", "10")
    assert status == ExitCode.PERMISSION, output
    assert "permission denied" in output and "Traceback" not in output
    assert "refused" in output  # the scheduler's answer, not a failure to connect
    assert settings_of(ctl, scheduler) == (30, "on")

    status, output = ctl_as_nobody("--socket", str(scheduler.socket), "status", "--json")
    assert status == ExitCode.OK, output
    assert json.loads(output)["tq"] == 30


def test_socket_the_user_may_not_open_is_a_permission_error(scheduler, ctl_as_nobody):
    scheduler.socket.parent.chmod(0o700)  # root's alone: nobody cannot reach the socket
    status, output = ctl_as_nobody("--socket", str(scheduler.socket), "status")
    assert status == ExitCode.PERMISSION, output
    assert "permission denied" in output and str(scheduler.socket) in output
    assert "Traceback" not in output


def test_socket_mode_0600_of_another_user_is_a_permission_error_naming_write(scheduler,
                                                                            ctl_as_nobody):
    scheduler.socket.chmod(0o600)
    status, output = ctl_as_nobody("--socket", str(scheduler.socket), "status")
    assert status == ExitCode.PERMISSION, output
    assert "permission denied" in output and "write (w) permission" in output
    assert "mode 0600, owner root" in output and "not readable" not in output


def test_a_socket_is_written_to_not_read(scheduler, ctl_as_nobody):
    scheduler.socket.chmod(0o622)  # others may write but not read: enough to connect
    status, output = ctl_as_nobody("--socket", str(scheduler.socket), "status", "--json")
    assert status == ExitCode.OK, output
    assert json.loads(output)["tq"] == 30


def test_a_directory_that_may_not_be_searched_is_named(scheduler, ctl_as_nobody):
    scheduler.socket.parent.chmod(0o700)
    status, output = ctl_as_nobody("--socket", str(scheduler.socket), "status")
    assert status == ExitCode.PERMISSION, output
    assert f"may not search the directory {scheduler.socket.parent}" in output


def test_a_path_that_is_no_socket_says_what_it_is(ctl, tmp_path):
    (tmp_path / "plain").write_text("")
    result = ctl("--socket", str(tmp_path / "plain"), "status")
    assert_clean_failure(result, ExitCode.UNREACHABLE, "is a regular file, not a socket")
