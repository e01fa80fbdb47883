"""`deadline_ms` in a control request: the sender's deadline on the monotonic clock. Past it
the request is dropped, not applied; without it a request is valid as it always was."""

import json
import time

import pytest
import trio
from trio_peer import Peer

from gemshare_nvs import protocol as p
from gemshare_nvs.config import control


def now_ms() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1_000_000


def current_tq(scheduler) -> int:
    with scheduler.connect() as conn:
        return conn.request({"op": "status"})["status"]["tq"]


def test_request_without_a_deadline_is_applied(scheduler):
    with scheduler.connect() as conn:
        assert conn.request({"op": "set", "tq": 5})["ok"] is True
    assert current_tq(scheduler) == 5


def test_request_with_a_deadline_to_come_is_applied(scheduler):
    with scheduler.connect() as conn:
        reply = conn.request({"op": "set", "tq": 6, "deadline_ms": now_ms() + 10_000})
    assert reply["ok"] is True and current_tq(scheduler) == 6


def test_request_past_its_deadline_is_dropped_and_logged(scheduler):
    with scheduler.connect() as conn:
        reply = conn.request({"op": "set", "tq": 7, "deadline_ms": now_ms() - 1000})
    assert reply["ok"] is False and reply["code"] == "expired"
    assert "nothing was changed" in reply["error"]
    assert current_tq(scheduler) == 30
    assert "dropped a request its sender gave up on" in scheduler.log()


def test_deadline_that_is_not_a_whole_number_is_refused(scheduler):
    for bad in ("soon", 1.5, True, -1):
        with scheduler.connect() as conn:
            reply = conn.request({"op": "set", "tq": 8, "deadline_ms": bad})
        assert reply["ok"] is False and reply["code"] == "invalid", bad
        assert "deadline_ms must be a whole number" in reply["error"]
    assert current_tq(scheduler) == 30


def test_the_shared_clock_is_the_monotonic_one():
    before = now_ms()
    assert before <= control.now_ms() <= now_ms()


async def wait_until(condition) -> None:
    with trio.fail_after(30):  # only catches hangs
        while not condition():
            await trio.sleep(0.02)


@pytest.mark.parametrize("wait_ms, applied", [(300, False), (30_000, True)],
                         ids=["its deadline passes meanwhile", "in time"])
async def test_a_change_held_up_by_a_slow_save_applies_only_before_its_deadline(
        inprocess_scheduler, short_tmp_dirs, wait_ms, applied):
    running = await inprocess_scheduler(state_dir=short_tmp_dirs())
    server = running.server
    peer = await Peer.connect(running.socket)
    deadline = control.now_ms() + wait_ms
    async with server._saving:  # an earlier change still being written: a slow disk
        await peer.send(p.Control({"op": "set", "tq": 7, "deadline_ms": deadline}))
        await wait_until(lambda: server._saving.statistics().tasks_waiting == 1)
        if not applied:
            await wait_until(lambda: control.now_ms() > deadline)
        assert server.policy.tq == 30  # nothing applies before its turn to be written
    reply = (await peer.recv()).body
    assert reply["ok"] is applied, reply
    assert server.policy.tq == (7 if applied else 30)
    kept = json.loads(server.configuration.state.path.read_text())["settings"]
    assert kept == ({"tq": 7} if applied else {})
