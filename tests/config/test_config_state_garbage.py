"""A real scheduler starts whatever it finds in its state directory, and says so in one
warning: settings.json that is a FIFO, a directory, a device, too big or nested too deeply, a
state directory that is a file. Copies of settings.json left half-written are removed."""

from __future__ import annotations

import json
import os
import re

import pytest

from gemshare_nvs.config.runtime_state import MAX_STATE_BYTES


def request(running, body: dict) -> dict:
    with running.connect() as control:
        return control.request(body)


def kept(running) -> dict:
    return request(running, {"op": "status"})["status"]["runtime_settings"]


def warnings(running) -> list[str]:
    """The warnings but the one of a control group this host lacks (the default, gemshare)."""
    return [line for line in re.findall(r"^.*WARNING.*$", running.log(), flags=re.M)
            if "control group" not in line]


# What the state directory holds -> whether a change can still be kept, and what the warning says.
def fifo(state):
    state.mkdir()
    os.mkfifo(state / "settings.json")
    return True, "it is a FIFO (named pipe), not a regular file"


def directory(state):
    (state / "settings.json").mkdir(parents=True)
    return False, "settings.json is a directory, not a file; remove it"


def device(state):
    state.mkdir()
    (state / "settings.json").symlink_to("/dev/null")
    return True, "it is a character device, not a regular file"


def too_big(state):
    state.mkdir()
    (state / "settings.json").write_text(" " * (MAX_STATE_BYTES + 1))
    return True, f"more than the {MAX_STATE_BYTES} allowed"


def nested(state):
    state.mkdir()
    (state / "settings.json").write_text('{"settings": ' + "[" * 50_000)
    return True, "nests more than"


def not_a_directory(state):
    state.write_text("")
    return False, "state is not a directory"


CASES = (fifo, directory, device, too_big, nested, not_a_directory)


@pytest.mark.parametrize("make", CASES, ids=[make.__name__ for make in CASES])
def test_the_scheduler_starts_and_says_what_it_found_once(scheduler_factory, short_tmp_dirs,
                                                          make):
    where = short_tmp_dirs()
    persistent, words = make(where / "state")
    running = scheduler_factory(directory=where)
    (warning,) = warnings(running)
    assert words in warning and "Traceback" not in running.log()
    assert kept(running)["persistent"] is persistent, kept(running)
    reply = request(running, {"op": "set", "tq": 9})
    assert reply["ok"] is True and ("temporary" not in reply) is persistent, reply
    if persistent:  # the change took the file's place, as a regular file
        assert json.loads((where / "state" / "settings.json").read_text()) == \
            {"settings": {"tq": 9}}


def test_copies_left_half_written_are_removed_at_start(scheduler_factory, short_tmp_dirs):
    where = short_tmp_dirs()
    state = where / "state"
    state.mkdir()
    (state / "settings.json").write_text('{"settings": {"tq": 11}}')
    for name in (".settings.json.k2j3h4", ".settings.json.9x8y7z"):
        (state / name).write_text('{"settings": {"tq": 5')  # a crash mid-write
    (state / "notes.txt").write_text("not ours to remove")
    running = scheduler_factory(directory=where)
    assert sorted(os.listdir(state)) == ["notes.txt", "settings.json"]
    assert "removed 2 unfinished copies of" in running.log()
    assert request(running, {"op": "status"})["status"]["tq"] == 11
