"""`gemsharectl top`'s loop driven by scripted keys on a fake clock, and the frames it draws."""

from __future__ import annotations

import pytest
from rich.console import Console

from gemshare_ctl import top_loop
from gemshare_ctl.top_view import WARMING_UP, top_view


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class ScriptedKeys:
    """Each wait takes `press_after` seconds of fake time when a key is due, else the whole
    timeout, and hands out the keys in order."""

    def __init__(self, clock: FakeClock, keys: list, press_after: float = 0.3):
        self.clock, self.keys, self.press_after = clock, list(keys), press_after
        self.waits: list[float] = []

    def wait(self, timeout: float):
        self.waits.append(timeout)
        key = self.keys.pop(0) if self.keys else None
        self.clock.now += min(timeout, self.press_after) if key is not None else timeout
        return key


class HoldingScheduler:
    """Client 1 holds all the time, client 2 waits; hold time follows the fake clock."""

    def __init__(self, clock: FakeClock):
        self.clock, self.start, self.polls = clock, clock.now, 0

    def __call__(self) -> dict:
        self.polls += 1
        return {"tq": 30, "anti_thrash": "on",
                "devices": [{"index": 0, "holders": [1], "waiters": [2]}],
                "clients": [{"id": 1, "name": "trainer", "state": "holding",
                             "hold_time_s": self.clock.now - self.start},
                            {"id": 2, "name": "waiter", "state": "waiting", "hold_time_s": 0.0}]}


def drive(keys: list, interval: float = 1.0, press_after: float = 0.3):
    clock = FakeClock()
    scheduler = HoldingScheduler(clock)
    source = ScriptedKeys(clock, keys, press_after)
    frames = []
    polls = top_loop.run(scheduler, lambda status, window: frames.append(window.shares()),
                         source, clock, interval)
    return polls, frames, source, clock


def test_q_quits_at_once_after_the_first_frame():
    polls, frames, source, _ = drive(["q"])
    assert polls == 1 and len(frames) == 1
    assert source.waits == [1.0]


def test_other_keys_wait_out_the_interval_then_q_quits():
    # Time passes only in waits: x at 0.3 s leaves 0.7 s of the first interval to wait.
    polls, frames, source, _ = drive(["x", None, None, "Q"])
    assert source.waits == pytest.approx([1.0, 0.7, 1.0, 1.0])
    assert polls == 3 and len(frames) == 3


def test_shares_warm_up_then_follow_the_holder():
    polls, frames, _, _ = drive([None, None, None, "q"])
    assert frames[0] == {1: None, 2: None}
    assert frames[1] == {1: pytest.approx(1.0), 2: 0.0}
    assert frames[-1] == {1: pytest.approx(1.0), 2: 0.0}


def test_the_interval_counts_from_the_poll():
    clock = FakeClock()
    scheduler = HoldingScheduler(clock)

    def slow_poll():
        clock.now += 0.4  # the scheduler took 0.4 s to answer
        return scheduler()

    source = ScriptedKeys(clock, [None, "q"])
    top_loop.run(slow_poll, lambda *_: None, source, clock, 1.0)
    assert source.waits == pytest.approx([0.6, 0.6])


def test_a_failing_poll_ends_the_loop_with_its_error():
    clock = FakeClock()

    def gone():
        raise ConnectionError("scheduler gone")

    with pytest.raises(ConnectionError):
        top_loop.run(gone, lambda *_: None, ScriptedKeys(clock, []), clock, 1.0)


def test_without_a_terminal_waiting_is_sleeping():
    slept = []
    assert top_loop.NoKeys(slept.append).wait(0.5) is None
    assert slept == [0.5]


def test_once_polls_twice_an_interval_apart():
    clock = FakeClock()
    scheduler = HoldingScheduler(clock)
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        clock.now += seconds

    window = top_loop.ShareWindow()
    status = top_loop.once(scheduler, sleep, clock, 2.0, window)
    assert scheduler.polls == 2 and slept == [2.0]
    assert status["clients"][0]["hold_time_s"] == pytest.approx(2.0)
    assert window.shares() == {1: pytest.approx(1.0), 2: 0.0}


def render(view) -> str:
    console = Console(width=160, record=True, color_system=None)
    console.print(view)
    return console.export_text()


def test_frame_names_holder_queue_and_shares():
    status = HoldingScheduler(FakeClock())()
    status["clients"][0].update(pid=42, allocated_bytes=3 << 30, weight=2)
    status["devices"][0]["last_drop"] = {"client": 2, "reason": "tq"}
    text = render(top_view(status, {1: 0.97, 2: 0.0}, "/run/s.sock", span_s=5, live=True))
    device_row = next(line for line in text.splitlines() if "#1 trainer" in line)
    assert "#2 waiter" in device_row and "#2 waiter" in device_row.split("#1 trainer")[1]
    assert "tq" in device_row
    holder_row = next(line for line in text.splitlines() if "trainer" in line and "97%" in line)
    assert "holding" in holder_row and "3.0 GiB" in holder_row and " 2 " in holder_row + " "
    assert "0%" in next(line for line in text.splitlines() if "waiting" in line)
    assert "q quits" in text and "/run/s.sock" in text


def test_frame_says_warming_up_and_no_clients():
    status = HoldingScheduler(FakeClock())()
    text = render(top_view(status, {1: None, 2: None}, "/s"))
    assert text.count(WARMING_UP) == 2
    assert "q quits" not in text
    assert "No clients connected." in render(top_view({"devices": []}, {}, "/s"))


def test_the_view_says_where_the_mps_daemon_stands_when_the_scheduler_runs_one():
    running = {"enabled": True, "running": True, "pipe_directory": "/run/gemshare/mps/pipe",
               "clients": 3, "user": 1000, "restarts": 1}
    text = render(top_view({"devices": [], "mps": running}, {}, "/s"))
    assert ("MPS: control daemon at /run/gemshare/mps/pipe: 3 clients through it, serving uid "
            "1000, started again 1 time") in text
    down = {"enabled": True, "running": False, "problem": "nvidia-cuda-mps-control is not on PATH"}
    assert "MPS: not running (nvidia-cuda-mps-control is not on PATH)" in \
        render(top_view({"devices": [], "mps": down}, {}, "/s"))
    assert "MPS" not in render(top_view({"devices": [], "mps": {"enabled": False}}, {}, "/s"))
