"""Settings changed with gemsharectl outlive a restart of a real scheduler, stay above the
config file through reloads until cleared, and a state directory that cannot be written is
said plainly."""

from __future__ import annotations

import time

import pytest


def request(running, body: dict) -> dict:
    with running.connect() as control:
        return control.request(body)


def status(running) -> dict:
    return request(running, {"op": "status"})["status"]


def test_a_set_tq_comes_back_after_a_restart_until_cleared(scheduler_factory, short_tmp_dirs):
    directory = short_tmp_dirs()
    first = scheduler_factory(directory=directory, tq=10)
    reply = request(first, {"op": "set", "tq": 12, "anti_thrash": "auto"})
    assert "temporary" not in reply  # kept
    assert first.stop() == 0
    second = scheduler_factory(directory=directory, tq=10)
    seen = status(second)
    assert (seen["tq"], seen["anti_thrash"]) == (12, "auto")
    assert seen["settings_from"]["tq"] == "gemsharectl"
    assert seen["runtime_settings"]["persistent"] is True
    assert "kept in" in second.log() and "tq 12" in second.log()
    request(second, {"op": "set", "clear": True})
    assert (status(second)["tq"], status(second)["settings_from"]["tq"]) == (10, "command line")
    assert second.stop() == 0
    assert status(scheduler_factory(directory=directory, tq=10))["tq"] == 10


def test_command_line_then_config_then_gemsharectl(scheduler_factory, short_tmp_dirs):
    directory = short_tmp_dirs()
    config = directory / "gemshare.toml"
    config.write_text("tq = 20\n")
    running = scheduler_factory(directory=directory, tq=10, grace_ms=700)
    seen = status(running)
    assert (seen["tq"], seen["settings_from"]["tq"]) == (20, f"config ({config}:1)")
    assert (seen["grace_ms"], seen["settings_from"]["grace_ms"]) == (700, "command line")
    request(running, {"op": "set", "tq": 5})
    config.write_text("tq = 25\ngrace_ms = 900\n")  # a reload does not undo gemsharectl's tq
    deadline = time.monotonic() + 10
    while "reloaded (the file changed)" not in running.log():
        assert time.monotonic() < deadline, running.log()
        time.sleep(0.05)
    assert status(running)["tq"] == 5
    assert "tq 25 is not used while the value set with gemsharectl (5) stands" in running.log()
    assert "grace_ms 900 takes effect when the scheduler restarts" in running.log()
    assert status(running)["grace_ms"] == 700
    request(running, {"op": "set", "clear": True})
    assert status(running)["tq"] == 25


def test_an_unwritable_state_directory_is_reported(scheduler_factory, short_tmp_dirs):
    directory = short_tmp_dirs()
    (directory / "file").write_text("")  # no directory can be made under a file, even by root
    running = scheduler_factory(directory=directory, state_dir=directory / "file" / "state")
    assert "will last only until the scheduler stops" in running.log()
    kept = status(running)["runtime_settings"]
    assert kept["persistent"] is False and "not writable" in kept["problem"]
    reply = request(running, {"op": "set", "tq": 7})
    assert reply["ok"] is True and reply["tq"] == 7  # applied, if only until it stops
    assert reply["temporary"].startswith(f"cannot write {directory}/file/state/settings.json")
    assert status(running)["runtime_settings"]["problem"] == reply["temporary"]


@pytest.mark.parametrize("saved", ['{"settings": {"tq": 0}}', "not json"])
def test_a_damaged_state_file_is_ignored_with_a_warning(scheduler_factory, short_tmp_dirs,
                                                        saved):
    directory = short_tmp_dirs()
    (directory / "state").mkdir()
    (directory / "state" / "settings.json").write_text(saved)
    running = scheduler_factory(directory=directory)
    assert status(running)["tq"] == 30
    assert "WARNING ignoring" in running.log()


def warnings(running) -> list[str]:
    return [line for line in running.log().splitlines() if " WARNING " in line]


def test_a_saved_setting_that_beats_the_command_line_is_a_warning_with_the_way_back(
        scheduler_factory, short_tmp_dirs):
    """make scheduler SCHEDULER_ARGS="--tq 10" after an earlier --set-tq: the 10 loses, and
    the log says so at WARNING, naming the saved value, where it is kept and how to drop it."""
    directory = short_tmp_dirs()
    first = scheduler_factory(directory=directory)
    request(first, {"op": "set", "tq": 9})
    assert first.stop() == 0
    second = scheduler_factory(directory=directory, tq=10, anti_thrash="auto")
    assert status(second)["tq"] == 9
    (line,) = [line for line in warnings(second) if "--tq 10" in line]
    assert "overridden by tq 9, set with gemsharectl" in line
    assert str(directory / "state" / "settings.json") in line
    assert "gemsharectl --reset-settings" in line
    assert not any("--anti-thrash" in line for line in warnings(second))  # not overridden


def test_a_file_setting_that_beats_the_command_line_is_a_warning_at_start_and_reload(
        scheduler_factory, short_tmp_dirs):
    directory = short_tmp_dirs()
    config = directory / "gemshare.toml"
    config.write_text("tq = 20\n")
    running = scheduler_factory(directory=directory, tq=10, anti_thrash="auto")
    (line,) = [line for line in warnings(running) if "--tq 10" in line]
    assert f"overridden by tq 20 in config ({config}:1)" in line and "remove it" in line
    config.write_text('tq = 20\nanti_thrash = "on"\n')
    deadline = time.monotonic() + 10
    while not any("--anti-thrash auto" in line for line in warnings(running)):
        assert time.monotonic() < deadline, running.log()
        time.sleep(0.05)
    (line,) = [line for line in warnings(running) if "--anti-thrash auto" in line]
    assert f"overridden by anti_thrash on in config ({config}:2)" in line
    assert status(running)["anti_thrash"] == "on"


def test_defaults_beaten_by_the_file_are_no_warning(scheduler_factory, short_tmp_dirs):
    directory = short_tmp_dirs()
    (directory / "gemshare.toml").write_text("tq = 20\n")
    running = scheduler_factory(directory=directory)  # no --tq: nothing typed was lost
    assert not any("overridden" in line for line in warnings(running))
