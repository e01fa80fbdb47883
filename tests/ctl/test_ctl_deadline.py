"""A change gemsharectl reports as failed never happens later: its request carries the moment it
stops waiting, and a scheduler that gets to it after that drops it."""

import json
import signal
import time

from gemshare_ctl.errors import ExitCode

LOG_TIMEOUT = 15.0  # only catches hangs


def test_change_that_timed_out_on_a_stopped_scheduler_is_not_applied_later(scheduler_factory,
                                                                           ctl):
    running = scheduler_factory()
    socket = str(running.socket)
    running.process.send_signal(signal.SIGSTOP)
    try:
        failed = ctl("--socket", socket, "--timeout", "1", "--set-tq", "3")
    finally:
        running.process.send_signal(signal.SIGCONT)
    assert failed.returncode == ExitCode.UNREACHABLE, failed.stderr
    assert "did not answer within 1 s" in failed.stderr
    deadline = time.monotonic() + LOG_TIMEOUT
    while "dropped a request its sender gave up on" not in running.log():
        assert time.monotonic() < deadline, running.log()
        time.sleep(0.05)
    status = ctl("--socket", socket, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["tq"] == 30
    # A scheduler that answers in time applies the same change.
    assert ctl("--socket", socket, "--timeout", "5", "--set-tq", "3").returncode == 0
    assert json.loads(ctl("--socket", socket, "status", "--json").stdout)["tq"] == 3
