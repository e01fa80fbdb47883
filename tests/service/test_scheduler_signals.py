"""Signals an operator (or a stray `kill -USR1`) may send: only SIGTERM and SIGINT stop the
scheduler, at any moment of its start too, and every exit leaves neither the socket nor the lock
file behind."""

import signal
import sys
import time
from pathlib import Path

import pytest
from signal_moments import survives_every_moment

LOG_TIMEOUT = 15.0  # only catches hangs


def wait_for_log(running, text: str) -> str:
    deadline = time.monotonic() + LOG_TIMEOUT
    while time.monotonic() < deadline:
        log = running.log()
        if text in log:
            return log
        assert running.process.poll() is None, f"the scheduler exited:\n{log}"
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never logged:\n{running.log()}")


def still_serving(running) -> None:
    assert running.process.poll() is None
    with running.connect() as control:
        assert control.request({"op": "status"})["ok"] is True


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGUSR2])
def test_user_signals_log_a_status_line_and_keep_it_running(scheduler, signum):
    with scheduler.connect() as control:  # one connection open, for the line to count
        assert control.request({"op": "status"})["ok"] is True  # so it has been accepted
        scheduler.process.send_signal(signum)
        log = wait_for_log(scheduler, f"{signum.name} received: status: pid "
                                      f"{scheduler.process.pid}")
    line = next(line for line in log.splitlines() if f"{signum.name} received" in line)
    assert "0 of 1024 clients" in line and "1 connections" in line and "tq 30 s" in line
    still_serving(scheduler)


def test_sighup_without_a_config_file_is_logged_and_harmless(scheduler_factory):
    running = scheduler_factory(config="")
    running.process.send_signal(signal.SIGHUP)
    wait_for_log(running, "reload (SIGHUP): this scheduler runs without a config file")
    still_serving(running)


def test_after_every_other_signal_sigterm_still_cleans_up(scheduler):
    for signum in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        scheduler.process.send_signal(signum)
    wait_for_log(scheduler, "SIGUSR2 received: status")
    still_serving(scheduler)
    lock = scheduler.socket.with_name("scheduler.sock.lock")
    assert scheduler.socket.exists() and lock.exists()
    scheduler.process.send_signal(signal.SIGTERM)
    assert scheduler.process.wait(15) == 0
    assert not scheduler.socket.exists() and not lock.exists()
    assert "SIGTERM received: stopping" in scheduler.log()


HELD = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def paused_at(scheduler_factory, directory: Path, module: str, launcher=()):
    """A scheduler started (through `launcher`, if any) and held as it first imports `module`
    (import_pause.py), and the function that lets it go on to listening."""
    paused, go = directory / "paused", directory / "go"
    pause = [*launcher, sys.executable, str(Path(__file__).with_name("import_pause.py")), module,
             str(paused), str(go)]
    running = scheduler_factory(directory=directory, wrapper=pause, wait=False)
    deadline = time.monotonic() + LOG_TIMEOUT
    while not paused.exists():
        assert running.process.poll() is None, running.log()
        assert time.monotonic() < deadline, running.log()
        time.sleep(0.02)

    def go_on() -> None:
        go.touch()
        running.wait_until_accepting()
    return running, go_on


def acted_on_every_held_signal(running) -> None:
    log = wait_for_log(running, "SIGUSR2 received: status")
    assert "SIGHUP came while starting: acting on it now" in log
    assert "(SIGHUP)" in log and "SIGUSR1 received: status" in log


def test_signals_while_the_libraries_are_imported_neither_kill_nor_get_lost(
        scheduler_factory, short_tmp_dirs):
    """SIGHUP, SIGUSR1 and SIGUSR2 sent while the scheduler still imports its libraries (held
    there, right before Trio's import) are acted on once it runs."""
    running, go_on = paused_at(scheduler_factory, short_tmp_dirs(), "trio")
    for signum in HELD:
        running.process.send_signal(signum)
    go_on()
    acted_on_every_held_signal(running)
    assert running.stop() == 0


def blocked_signals(pid: int) -> set[int]:
    """The signals the process blocks, from /proc (SigBlk: a hexadecimal mask, bit N-1 for N)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            mask = int(line.split()[1], 16)
            return {bit + 1 for bit in range(64) if mask >> bit & 1}
    raise AssertionError(f"no SigBlk in /proc/{pid}/status")


def test_started_through_hold_signals_it_survives_signals_before_its_first_line(
        scheduler_factory, short_tmp_dirs, hold_signals):
    """As the installed command starts: hold-signals blocks SIGHUP, SIGUSR1 and SIGUSR2 before
    the interpreter starts (held here before the scheduler's first module of its own is even
    imported), and the scheduler acts on them once it runs, with nothing blocked any more."""
    running, go_on = paused_at(scheduler_factory, short_tmp_dirs(),
                               "gemshare_nvs.service.early_signals", [hold_signals])
    assert blocked_signals(running.process.pid) >= set(HELD)
    for signum in HELD:
        running.process.send_signal(signum)
    go_on()
    acted_on_every_held_signal(running)
    assert not blocked_signals(running.process.pid) & set(HELD)  # nor for what it starts later
    assert running.stop() == 0


@pytest.mark.parametrize("signum", HELD, ids=lambda signum: signum.name)
def test_through_hold_signals_each_signal_from_the_first_milliseconds_is_acted_on(
        scheduler_factory, hold_signals, signum):
    """As make install's command, make scheduler, the unit and the image start it: sent 1 to
    50 ms after the exec (SIGUSR1 and SIGUSR2 too, which once killed it in the first 10 ms)."""
    survives_every_moment(lambda: scheduler_factory(wrapper=[hold_signals], wait=False), signum)
