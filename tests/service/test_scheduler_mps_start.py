"""The MPS control daemon comes up beside serving, never before it: a scheduler with --mps serves
from its first moment whatever its control program does (the stand-in of tests/fake_mps can
hang), runs the programs that register meanwhile as plain contexts under the lock, kills a
control program that hangs, and forgets the MPS state of programs whose daemon died."""

from __future__ import annotations

import os
import signal

from metrics_scrape import metrics_url, scrape
from test_scheduler_mps import calls, daemon_pid, mps_env, running_mps, status, wait_for

from gemshare_nvs import protocol as p
from gemshare_nvs.core.rules.mps_rules import DAEMON_DIED, NO_DAEMON
from gemshare_nvs.service.mps import COMMAND_TIMEOUT_S, STARTING

NO_GRANT_S = 1.0  # how long a waiter is watched for a grant that must not come


def registered(conn) -> list:
    """The frames up to REGISTERED (an MPS frame comes first when the program goes through)."""
    frames = []
    while not frames or not isinstance(frames[-1], p.Registered):
        frames.append(conn.recv()[0])
    return frames


def granted(conn) -> bool:
    """Whether a LOCK_GRANTED comes within NO_GRANT_S."""
    try:
        while True:
            if isinstance(conn.recv(timeout=NO_GRANT_S)[0], p.LockGranted):
                return True
    except TimeoutError:
        return False


def test_a_hung_control_program_holds_up_no_serving(scheduler_factory, short_tmp_dirs):
    directory = short_tmp_dirs()
    record = directory / "mps.jsonl"
    scheduler = scheduler_factory(directory=directory, mps=True, anti_thrash="auto",
                                  env=mps_env(record, FAKE_MPS_HANG="1"))
    # Serving (the fixture waits for the line that says so) while the first call hangs.
    wait_for(lambda: any(c["event"] == "hang" for c in calls(record)))
    mps = status(scheduler)["mps"]
    assert (mps["running"], mps["problem"]) == (False, STARTING)
    with scheduler.connect() as conn:
        conn.send(p.Register(0, 0, "infer"))
        assert [type(frame) for frame in registered(conn)] == [p.Registered]  # plain context
        (client,) = status(scheduler)["clients"]
        assert (client["mps"], client["mps_why"]) == (False, NO_DAEMON)


def test_programs_that_register_while_it_starts_take_turns_under_the_lock(scheduler_factory,
                                                                         short_tmp_dirs):
    directory = short_tmp_dirs()
    # `on` keeps one holder at a time: the second program must wait for the first's release.
    scheduler = scheduler_factory(directory=directory, mps=True, anti_thrash="on",
                                  env=mps_env(directory / "mps.jsonl", FAKE_MPS_HANG="1"))
    with scheduler.connect() as first, scheduler.connect() as second:
        for conn, name in ((first, "one"), (second, "two")):
            conn.send(p.Register(0, 0, name))
            registered(conn)
        first.send(p.RequestLock(0))
        assert granted(first)
        second.send(p.RequestLock(0))
        assert not granted(second)
        first.send(p.LockReleased(0, p.ReleaseReason.IDLE))
        assert granted(second)
    assert not status(scheduler)["mps"]["running"]


def test_a_hung_control_program_is_killed_after_its_timeout(scheduler_factory, short_tmp_dirs):
    directory = short_tmp_dirs()
    record = directory / "mps.jsonl"
    scheduler = scheduler_factory(directory=directory, mps=True,
                                  env=mps_env(record, FAKE_MPS_HANG="1"))
    (hung, *_) = wait_for(lambda: [c["pid"] for c in calls(record) if c["event"] == "hang"])
    # Deaf to SIGTERM: only a kill ends it, and the scheduler says what it did.
    problem = wait_for(lambda: "was killed" in (s := status(scheduler)["mps"]["problem"]) and s,
                       timeout=COMMAND_TIMEOUT_S + 20)
    assert "did not answer 'get_server_list' within" in problem, problem

    def gone() -> bool:
        try:
            os.kill(hung, 0)
        except ProcessLookupError:
            return True
        return False
    wait_for(gone)
    assert scheduler.stop() == 0


def test_a_daemon_that_dies_ends_its_clients_mps_state(scheduler_factory, short_tmp_dirs):
    directory = short_tmp_dirs()
    scheduler = scheduler_factory(directory=directory, mps=True, anti_thrash="auto",
                                  metrics="127.0.0.1:0", env=mps_env(directory / "mps.jsonl"))
    running_mps(scheduler)
    url = metrics_url(scheduler)
    with scheduler.connect() as conn:
        conn.send(p.Register(0, 0, "infer"))
        assert isinstance(registered(conn)[0], p.Mps)
        assert status(scheduler)["mps"]["clients"] == 1
        assert scrape(url).only("gemshare_mps_clients") == 1
        os.kill(daemon_pid(directory / "mps" / "pipe"), signal.SIGKILL)
        wait_for(lambda: status(scheduler)["mps"]["restarts"] == 1)
        (client,) = status(scheduler)["clients"]
        assert (client["mps"], client["mps_why"]) == (False, DAEMON_DIED)
        mps = running_mps(scheduler)  # started again; the program's old contexts did not return
        assert (mps["clients"], mps["user"]) == (0, None)
        assert scrape(url).only("gemshare_mps_clients") == 0
    assert "the 1 that went through it no longer count as its clients" in scheduler.log()
