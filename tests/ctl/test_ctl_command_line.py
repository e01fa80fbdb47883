"""gemsharectl's command line behaves as people try it: --socket and --timeout after the command
too, range errors in the project's words, `top` into a pipe, and plain words for a reload that
has nothing to read."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from conftest import ctl_command
from ctl_helpers import RUN_TIMEOUT

from gemshare_ctl.errors import ExitCode


def test_socket_and_timeout_after_the_command_are_taken(ctl, scheduler, tmp_path):
    socket = str(scheduler.socket)
    result = ctl("status", "--json", "--socket", socket, "--timeout", "3")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["tq"] == 30
    # After the command wins over before it.
    result = ctl("--socket", str(tmp_path / "nobody.sock"), "status", "--socket", socket)
    assert result.returncode == 0, result.stderr
    result = ctl("--socket", socket, "status", "--socket", str(tmp_path / "nobody.sock"))
    assert result.returncode == ExitCode.UNREACHABLE
    assert f"no gemshare-scheduler is listening on {tmp_path / 'nobody.sock'}" in result.stderr


@pytest.mark.parametrize("command", [["status"], ["top", "--once", "--interval", "0.1"],
                                     ["client", "4242"], ["config", "reload"]])
def test_every_command_that_asks_the_scheduler_takes_the_socket_after_it(ctl, tmp_path, command):
    missing = tmp_path / "nobody.sock"
    result = ctl(*command, "--socket", str(missing), "--timeout", "1")
    assert result.returncode == ExitCode.UNREACHABLE, result.stderr
    assert f"no gemshare-scheduler is listening on {missing}" in result.stderr


@pytest.mark.parametrize("args, words", [
    (["--timeout", "0", "status"], "timeout must be a number of seconds from 0.1 to 3600, "
                                   "not '0' (for example --timeout 10)"),
    (["status", "--timeout", "nan"], "timeout must be a number of seconds from 0.1 to 3600, "
                                     "not 'nan'"),
    (["top", "--interval", "61"], "interval must be a number of seconds from 0.1 to 60, "
                                  "not '61' (for example --interval 2)"),
    (["client", "0"], "pid must be a whole number from 1 to 4194304, not 0 "
                      "(for example client 4242)"),
    (["client", "twelve"], "pid must be a whole number from 1 to 4194304, not 'twelve'"),
])
def test_range_errors_say_what_is_wanted_in_the_projects_words(ctl, tmp_path, args, words):
    result = ctl("--socket", str(tmp_path / "none.sock"), *args, env={"COLUMNS": "400"})
    assert result.returncode == ExitCode.INVALID
    assert words in result.stderr
    assert "Input should be" not in result.stderr


def test_reload_without_a_config_file_says_so_plainly(ctl, scheduler_factory):
    scheduler = scheduler_factory(config="")
    result = ctl("--socket", str(scheduler.socket), "config", "reload")
    assert result.returncode == ExitCode.INVALID
    message = " ".join(result.stderr.split())
    assert f"the scheduler on {scheduler.socket} did not reload its config file: it runs " \
           "without a config file" in message
    assert "start it with --config FILE" in message
    assert "refused the value" not in message


def start_top_into_a_pipe(socket) -> subprocess.Popen:
    return subprocess.Popen([*ctl_command(), "--socket", str(socket), "top", "--interval", "0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)


def read_frames(stream, count: int) -> str:
    """What `top` wrote until `count` frames have come (each begins with its header)."""
    seen, deadline = "", time.monotonic() + RUN_TIMEOUT
    while seen.count("gemshare-scheduler on ") < count:
        assert time.monotonic() < deadline, seen
        line = stream.readline().decode()
        assert line, f"top ended after {seen!r}"
        seen += line
    return seen


def test_top_into_a_pipe_streams_plain_frames_until_interrupted(scheduler):
    top = start_top_into_a_pipe(scheduler.socket)
    try:
        frames = read_frames(top.stdout, 3)
        top.send_signal(signal.SIGINT)
        assert top.wait(RUN_TIMEOUT) == 0
        assert "\x1b" not in frames  # no alternate screen, no colour: plain text
        assert "q quits" not in frames and frames.count("No clients connected.") >= 2
        assert b"Traceback" not in top.stderr.read()
    finally:
        if top.poll() is None:
            top.kill()
            top.wait()


def test_top_stops_quietly_when_the_reader_goes_away(scheduler):
    top = start_top_into_a_pipe(scheduler.socket)
    try:
        read_frames(top.stdout, 1)
        top.stdout.close()  # as `gemsharectl top | head` does once it has its lines
        assert top.wait(RUN_TIMEOUT) == 0
        assert top.stderr.read().decode() == ""
    finally:
        if top.poll() is None:
            top.kill()
            top.wait()
