"""One log format for every long-running command: the scheduler's and the device plugin's lines
look alike, the time first off the journal, the syslog priority first on it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PLAIN = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (DEBUG|INFO|WARNING|ERROR) \S")
JOURNAL = re.compile(r"^<[3467]>(DEBUG|INFO|WARNING|ERROR) \S")


def first_lines(command: list[str], log: Path, env: dict) -> list[str]:
    """The lines a command logs in its first moments; it is stopped then."""
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=sink,
                                   stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 30
        while not log.read_text().count("\n") and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(15)
    return log.read_text().splitlines()


def commands(tmp_path: Path) -> dict[str, list[str]]:
    return {
        "scheduler": [sys.executable, "-m", "gemshare_nvs.daemon", "--socket",
                      str(tmp_path / "s.sock"), "--config", "", "--state-dir", ""],
        "device plugin": [sys.executable, "-m", "gemshare_plugin", "--kubelet-socket-dir",
                          str(tmp_path), "--library", str(tmp_path / "no-libnvs.so")],
    }


@pytest.mark.parametrize("which", ["scheduler", "device plugin"])
def test_lines_start_with_the_time_and_level(tmp_path, which):
    env = {k: v for k, v in os.environ.items() if k not in ("JOURNAL_STREAM", "NOTIFY_SOCKET")}
    lines = first_lines(commands(tmp_path)[which], tmp_path / "log", env)
    assert lines and all(PLAIN.match(line) for line in lines), lines


@pytest.mark.parametrize("which", ["scheduler", "device plugin"])
def test_lines_into_the_journal_start_with_their_priority(tmp_path, which):
    log = tmp_path / "log"
    log.touch()
    info = log.stat()  # the file stands in for journald's stream: stderr is it
    env = {**{k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"},
           "JOURNAL_STREAM": f"{info.st_dev}:{info.st_ino}"}
    lines = first_lines(commands(tmp_path)[which], log, env)
    assert lines and all(JOURNAL.match(line) for line in lines), lines
