"""A real scheduler process reloads its config file on SIGHUP and when the file changes; a bad
or vanished file changes nothing and disconnects nobody; a bad file at start stops the start."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from gemshare_nvs import protocol as p

RELOAD_TIMEOUT = 10.0  # the file is polled every second; only catches hangs

START = """\
tq = 30

[[rule]]
match = { label = "notebook" }
weight = 2
"""


def status(running) -> dict:
    with running.connect() as control:
        return control.request({"op": "status"})["status"]


def eventually(running, predicate, timeout: float = RELOAD_TIMEOUT) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        seen = status(running)
        if predicate(seen):
            return seen
        if time.monotonic() > deadline:
            pytest.fail(f"status never got there: {seen}\nlog:\n{running.log()}")
        time.sleep(0.05)


def log_says(running, words: str, timeout: float = RELOAD_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while words not in running.log():
        if time.monotonic() > deadline:
            pytest.fail(f"the log never said {words!r}:\n{running.log()}")
        time.sleep(0.05)


def weight_of(seen: dict, client_id: int):
    return next(c["weight"] for c in seen["clients"] if c["id"] == client_id)


@pytest.fixture
def configured(scheduler_factory, short_tmp_dirs):
    """A scheduler started on START, with a client labelled notebook: (scheduler, config file,
    the client's connection, its id)."""
    directory = short_tmp_dirs()
    config = directory / "gemshare.toml"
    config.write_text(START)
    running = scheduler_factory(directory=directory)
    client = running.connect()
    client.send(p.Register(device=0, flags=0, process_name="nb", label="notebook"))
    registered, _ = client.recv()
    assert isinstance(registered, p.Registered), registered
    assert weight_of(status(running), registered.client_id) == 2
    yield running, config, client, registered.client_id
    client.close()


def still_served(client) -> None:
    """The client's connection is open and its lock requests are granted."""
    client.send(p.RequestLock(0))
    for _ in range(10):  # past what a reload told it (SCHED_MODE)
        if isinstance(client.recv()[0], p.LockGranted):
            break
    else:
        pytest.fail("no grant among 10 messages")
    client.send(p.LockReleased(0, p.ReleaseReason.IDLE))


def rewrite_unseen(path: Path, text: str) -> None:
    """Rewrite the file in place with text of the same length and its old modification time, so
    that only a SIGHUP can make the scheduler read it again."""
    before = path.stat()
    assert len(text.encode()) == before.st_size
    with open(path, "r+") as out:
        out.write(text)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_sighup_reloads_settings_and_every_clients_terms(configured):
    running, config, client, client_id = configured
    rewrite_unseen(config, START.replace("tq = 30", "tq = 12").replace("= 2", "= 3"))
    time.sleep(1.5)  # a poll or more: the file looks unchanged, so nothing happens
    assert status(running)["tq"] == 30
    running.process.send_signal(signal.SIGHUP)
    seen = eventually(running, lambda s: s["tq"] == 12)
    assert weight_of(seen, client_id) == 3
    assert seen["settings_from"]["tq"] == f"config ({config}:1)"
    assert "reloaded (SIGHUP): 1 rule; tq 12" in running.log()
    still_served(client)


def test_an_edited_file_applies_by_itself(configured):
    running, config, client, client_id = configured
    config.write_text(START.replace("tq = 30", "tq = 9\nmin_slice_ms = 100")
                      .replace("weight = 2", "weight = 0.5"))
    seen = eventually(running, lambda s: s["tq"] == 9)
    assert (seen["min_slice_ms"], weight_of(seen, client_id)) == (100, 0.5)
    assert "reloaded (the file changed)" in running.log()
    # The client was told the new quantum, not disconnected.
    assert client.recv()[0] == p.SchedMode(p.Mode.ON, 9)
    still_served(client)


def test_a_bad_file_is_refused_whole_and_the_old_one_stays(configured):
    running, config, client, client_id = configured
    config.write_text("tq = 5\n\n[[rule]]\nmatch = { label = \"notebook\" }\nweight = -1\n")
    log_says(running, "refused as a whole")
    assert f"{config}:5: rule 1 weight: weight must be a number greater than 0" in running.log()
    seen = status(running)
    assert (seen["tq"], weight_of(seen, client_id)) == (30, 2)  # not even the good tq
    assert "rule 1 weight" in seen["config"]["problem"]
    still_served(client)
    config.write_text(START.replace("tq = 30", "tq = 31"))  # fixed: taken, problem gone
    seen = eventually(running, lambda s: s["tq"] == 31)
    assert seen["config"]["problem"] is None


def test_a_vanished_file_keeps_the_configuration_loaded_from_it(configured):
    running, config, client, client_id = configured
    running.process.send_signal(signal.SIGHUP)  # a reload that changes nothing
    log_says(running, "reloaded (SIGHUP)")
    config.unlink()
    log_says(running, "is gone (the file was removed): keeping the configuration loaded")
    seen = status(running)
    assert (seen["tq"], weight_of(seen, client_id)) == (30, 2)
    assert seen["config"]["loaded"] is True and "gone" in seen["config"]["problem"]
    still_served(client)
    config.write_text(START.replace("= 2", "= 4"))  # back again: read at once
    eventually(running, lambda s: weight_of(s, client_id) == 4)


def test_a_file_that_appears_later_is_read(scheduler_factory, short_tmp_dirs):
    directory = short_tmp_dirs()
    running = scheduler_factory(directory=directory)
    assert status(running)["config"] == {"path": str(directory / "gemshare.toml"),
                                         "loaded": False, "rules": 0, "loaded_at": None,
                                         "problem": None}
    (directory / "gemshare.toml").write_text("anti_thrash = \"auto\"\n")
    eventually(running, lambda s: s["anti_thrash"] == "auto")


def test_a_bad_file_at_start_stops_the_start_with_every_problem(short_tmp_dirs, run_scheduler):
    directory = short_tmp_dirs()
    config = directory / "gemshare.toml"
    config.write_text("tq = 0\n[[rule]]\nmatch = { user = \"no-such-user-here\" }\n")
    result = run_scheduler("--socket", str(directory / "s.sock"), "--config", str(config))
    assert result.returncode == 2
    assert f"{config}:1: tq: tq must be a whole number" in result.stderr
    assert f"{config}:3: rule 1 match.user: no user named 'no-such-user-here'" in result.stderr
    assert f"gemsharectl config check {config}" in result.stderr
    assert not (directory / "s.sock").exists()  # refused before touching the socket


def test_rules_that_can_never_match_are_warned_about_at_start_and_on_reload(scheduler_factory,
                                                                            short_tmp_dirs):
    directory = short_tmp_dirs()
    config = directory / "gemshare.toml"
    config.write_text(START + '\n[[rule]]\nmatch = { label = "notebook", process = "nb" }\n'
                              'weight = 3\n')
    running = scheduler_factory(directory=directory)
    log_says(running, f"config {config}:7: rule 2 (line 7) can never match: rule 1 (line 3) "
                      "comes first")
    assert status(running)["config"]["rules"] == 2  # a warning, not a refusal
    config.write_text('[[rule]]\nmatch = { process = "*" }\nweight = 1\n\n'
                      '[[rule]]\nmatch = { label = "x" }\nweight = 2\n')
    log_says(running, f"config {config}:5: rule 2 (line 5) can never match: rule 1 (line 1)")
    seen = status(running)
    assert (seen["tq"], seen["config"]["problem"]) == (30, None)
