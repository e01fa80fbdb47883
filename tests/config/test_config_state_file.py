"""The state file that keeps gemsharectl's settings across restarts: written whole, read back
checked, and a directory that cannot be written said plainly."""

from __future__ import annotations

import json
import os

import pytest

from gemshare_nvs.config.runtime_state import StateFile
from gemshare_nvs.protocol import Mode


def test_saved_settings_come_back(tmp_path):
    state = StateFile(tmp_path / "state")  # made at the first save
    assert state.problem is None and state.load() == {}
    assert state.save({"tq": 12, "anti_thrash": Mode.OFF}) is True
    assert StateFile(tmp_path / "state").load() == {"tq": 12, "anti_thrash": Mode.OFF}
    assert json.loads(state.path.read_text()) == {"settings": {"tq": 12, "anti_thrash": "off"}}
    assert sorted(os.listdir(tmp_path / "state")) == ["settings.json"]  # no temporary left


def test_clearing_writes_an_empty_set(tmp_path):
    state = StateFile(tmp_path)
    state.save({"tq": 12})
    state.save({})
    assert StateFile(tmp_path).load() == {}


def test_entries_no_longer_valid_are_left_out_with_a_warning(tmp_path, caplog):
    (tmp_path / "settings.json").write_text(json.dumps(
        {"settings": {"tq": 0, "anti_thrash": "auto", "grace_ms": 5, "min_slice_ms": 100}}))
    assert StateFile(tmp_path).load() == {"anti_thrash": Mode.AUTO, "min_slice_ms": 100}
    assert "tq must be a whole number" in caplog.text
    assert "grace_ms is not a setting gemsharectl changes" in caplog.text


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"settings": 5}', "\xff"])
def test_an_unreadable_file_counts_as_empty(tmp_path, caplog, text):
    (tmp_path / "settings.json").write_text(text, errors="surrogateescape")
    assert StateFile(tmp_path).load() == {}
    assert "ignoring the settings kept in" in caplog.text


def test_no_directory_means_nothing_is_kept():
    state = StateFile(None)
    assert state.save({"tq": 5}) is False and state.load() == {}
    assert "--state-dir" in state.problem


def test_a_read_only_directory_is_reported_and_the_file_left_alone(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes through file modes; tests/config/test_config_restart.py "
                    "covers an unwritable directory with a file in its place")
    tmp_path.chmod(0o555)
    try:
        state = StateFile(tmp_path / "state")
        assert "is not writable" in state.problem
        assert state.save({"tq": 5}) is False and "cannot write" in state.problem
    finally:
        tmp_path.chmod(0o755)


def test_a_file_where_the_directory_should_be_cannot_be_written(tmp_path):
    (tmp_path / "state").write_text("")
    state = StateFile(tmp_path / "state")
    assert state.save({"tq": 5}) is False
    assert state.problem.startswith(f"cannot write {tmp_path}/state/settings.json")
