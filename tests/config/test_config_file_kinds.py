"""Whatever stands at the config file's path, reading it neither blocks nor crashes the
scheduler: a FIFO, a directory or a device is refused with words that say what it is, as is a
file too big or nested too deeply; at start that stops the start (exit status 2), later the
configuration in force stays, and SIGTERM still ends the scheduler at once."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

import pytest

from gemshare_nvs.config.file import MAX_CONFIG_BYTES, read
from gemshare_nvs.config.parsing import ConfigError

STOP_TIMEOUT = 10.0  # only catches hangs: a read that blocks would never end


def fifo(path):
    os.mkfifo(path)


def directory(path):
    path.mkdir()


def device(path):
    path.symlink_to("/dev/null")  # a config path may be a link: what it points at counts


def too_big(path):
    path.write_text("# padding\n" * (MAX_CONFIG_BYTES // 10 + 1))


def nested(path):
    path.write_text("tq = " + "[" * 100_000)


KINDS = {fifo: "it is a FIFO (named pipe), not a regular file",
         directory: "it is a directory, not a regular file",
         device: "it is a character device, not a regular file",
         too_big: f"more than the {MAX_CONFIG_BYTES} allowed",
         nested: "nested too deeply"}


def refusal_of(path) -> ConfigError:
    """What reading `path` raises; in a thread, so that a read that blocks fails the test
    instead of hanging it."""
    outcome = {}

    def attempt():
        try:
            read(path)
        except ConfigError as error:
            outcome["error"] = error

    reader = threading.Thread(target=attempt, daemon=True)
    reader.start()
    reader.join(STOP_TIMEOUT)
    assert not reader.is_alive(), f"reading {path} blocked"
    assert "error" in outcome, f"{path} was read as a config file"
    return outcome["error"]


@pytest.mark.parametrize("make", KINDS, ids=[make.__name__ for make in KINDS])
def test_each_is_refused_by_the_reader_with_what_it_is(tmp_path, make):
    path = tmp_path / "gemshare.toml"
    make(path)
    assert KINDS[make] in str(refusal_of(path))


@pytest.mark.parametrize("make", KINDS, ids=[make.__name__ for make in KINDS])
def test_at_start_each_stops_the_start_with_one_clear_message(run_scheduler, short_tmp_dirs,
                                                               make):
    where = short_tmp_dirs()
    make(where / "gemshare.toml")
    try:
        done = run_scheduler("--socket", str(where / "scheduler.sock"), "--config",
                             str(where / "gemshare.toml"), "--state-dir", "")
    except subprocess.TimeoutExpired:
        pytest.fail("the scheduler hung reading its config file")
    assert done.returncode == 2, done.stderr
    assert KINDS[make] in done.stderr and "Traceback" not in done.stderr
    assert "not starting: fix" in done.stderr


def reload_reply(running) -> dict:
    with running.connect(timeout=STOP_TIMEOUT) as control:
        return control.request({"op": "reload"})


@pytest.mark.parametrize("make", [fifo, directory], ids=["fifo", "directory"])
def test_a_reload_refuses_it_at_once_and_sigterm_still_stops(scheduler_factory, short_tmp_dirs,
                                                             make):
    where = short_tmp_dirs()
    config = where / "gemshare.toml"
    config.write_text("tq = 20\n")
    running = scheduler_factory(directory=where)
    config.unlink()
    make(config)
    reply = reload_reply(running)
    assert reply["ok"] is False and KINDS[make] in reply["error"]
    assert "the configuration in force stays" in reply["error"]
    with running.connect() as control:
        assert control.request({"op": "status"})["status"]["tq"] == 20
    running.process.send_signal(signal.SIGTERM)
    try:
        assert running.process.wait(STOP_TIMEOUT) == 0
    except subprocess.TimeoutExpired:
        pytest.fail("SIGTERM did not stop the scheduler")
    assert "Traceback" not in running.log()
