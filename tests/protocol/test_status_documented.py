"""The status object (`gemsharectl status --json`) carries its schema's version, and every key
it can hold is documented in docs/protocol.md: a key added without a word there fails here."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from gemshare_nvs import protocol as p
from gemshare_nvs.observe.status import STATUS_SCHEMA, fit_status

REPO = Path(__file__).resolve().parents[2]
FAKE_MPS = REPO / "tests" / "fake_mps"
GIB = 1 << 30


def status_section() -> str:
    text = (REPO / "docs" / "protocol.md").read_text()
    return text.split("`STATUS` holds at least", 1)[1].split("\n## ", 1)[0]


def bullets(section: str) -> dict[str, str]:
    """Each bullet of the section by the key it opens with: "- `devices`, a list: ..." ->
    "devices"."""
    found = {}
    for bullet in re.split(r"\n(?=- )", "\n" + section):
        opening = re.match(r"\s*- `(\w+)`", bullet)
        if opening:
            found[opening[1]] = bullet
    return found


def named(key: str, text: str) -> bool:
    """Whether the text names the key, as `key` or inside a JSON example as "key"."""
    return f"`{key}`" in text or f'"{key}"' in text


def keys_below(value, path: str = "") -> set[tuple[str, str]]:
    """(path, key) of every key in `value`, at any depth, lists looked into; keys that are
    numbers (client ids and device numbers as text) are data, not keys."""
    found = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            if not key.isdigit():
                found.add((path, key))
            found |= keys_below(inner, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for item in value:
            found |= keys_below(item, f"{path}[]")
    return found


def undocumented(status: dict) -> list[str]:
    by_key = bullets(status_section())
    missing = []
    for path, key in sorted(keys_below(status)):
        top = (path or key).split(".")[0].split("[")[0]
        # A top-level key is listed in the first bullet; the keys below one, in its own.
        where = by_key.get("schema", "") if not path else by_key.get(top, "")
        if not named(key, where):
            missing.append(f"{path}.{key}" if path else key)
    return missing


def full_status(scheduler_factory, short_tmp_dirs) -> dict:
    """A status with every part filled in: MPS, two clients that moved memory, terms given with
    gemsharectl, a gang, a lent idle gap's keys."""
    directory = short_tmp_dirs()
    scheduler = scheduler_factory(
        directory=directory, mps=True, anti_thrash="auto", capacity_mib=1024,
        env={"PATH": f"{FAKE_MPS}:{os.environ['PATH']}",
             "FAKE_MPS_RECORD": str(directory / "mps.jsonl")})
    holder, waiter, member = scheduler.connect(), scheduler.connect(), scheduler.connect()
    try:
        for conn, name in ((holder, "trainer"), (waiter, "notebook"), (member, "rank0")):
            conn.send(p.Register(0, 0, name, label=name))
            conn.send(p.MemReport(allocated_bytes=GIB // 2, device_total_bytes=2 * GIB))
        member.send(p.Gang(local_size=2, world_size=2, rank=0, name="job"))
        holder.send(p.RequestLock())
        while not isinstance(holder.recv()[0], p.LockGranted):
            pass
        holder.send(p.Moved(flags=p.MOVED_DONE, bytes=GIB // 4, elapsed_us=10_000))  # back in
        holder.send(p.Moved(flags=p.MOVED_DONE | p.MOVED_TO_HOST, bytes=GIB // 4,
                            elapsed_us=20_000))
        with scheduler.connect() as control:
            control.request({"op": "client", "pid": os.getpid(), "weight": 2})
            deadline = time.monotonic() + 10
            while True:
                status = control.request({"op": "status"})["status"]
                if len(status["clients"]) == 3 and status["devices"] and \
                        "move_rates" in status["devices"][0]:
                    return status
                assert time.monotonic() < deadline, status
                time.sleep(0.05)
    finally:
        for conn in (holder, waiter, member):
            conn.close()


def test_status_carries_its_schema_version(scheduler_factory, short_tmp_dirs):
    status = full_status(scheduler_factory, short_tmp_dirs)
    assert status["schema"] == STATUS_SCHEMA
    assert f"`schema` ({STATUS_SCHEMA}" in status_section()


def test_every_key_of_the_status_is_documented(scheduler_factory, short_tmp_dirs):
    status = full_status(scheduler_factory, short_tmp_dirs)
    trimmed = fit_status(status, 2048)  # `truncated` and what it says
    assert "truncated" in trimmed
    assert undocumented(status) + undocumented(trimmed) == []


def test_an_undocumented_key_is_found():
    assert undocumented({"schema": 1, "tq": 30, "some_new_key": 1}) == ["some_new_key"]
    assert undocumented({"evicting": []}) == ["evicting"]  # a device's key, not a top one
    assert undocumented({"devices": [{"index": 0, "fresh": 2}]}) == ["devices[].fresh"]
