"""Gangs: the processes of one distributed job are granted their locks together, never some of
them holding while others wait."""

import random

import pytest
from policy_driver import Driver

from gemshare_nvs import protocol as p
from gemshare_nvs.observe.status import build_status

TQ = 30
GRACE = 10.0


def join(driver: Driver, cid: int, name: str = "job", size: int = 2, rank: int = 0) -> list:
    return driver._take(driver.policy.gang(cid, p.Gang(size, size, rank, 0, name), driver.now))


def granted(driver: Driver, cid: int) -> list[int]:
    """Devices granted to `cid` since the last look (its other messages are dropped)."""
    return [m.device for m in driver.take_sent(cid) if isinstance(m, p.LockGranted)]


def warnings(driver: Driver) -> list[str]:
    return [log.text for log in driver.logs if log.warning]


def gang_of_two(driver: Driver, name: str = "job", first: int = 1, uid: int = 1000) -> None:
    """Clients `first` (device 0) and `first + 1` (device 1), one job."""
    for rank, cid in enumerate((first, first + 1)):
        driver.register(cid, name=f"rank{rank}", uid=uid)
        join(driver, cid, name, rank=rank)


def gang_holding(driver: Driver) -> None:
    """A gang of two holding devices 0 and 1, what it was sent taken."""
    gang_of_two(driver)
    driver.request(1, device=0)
    driver.request(2, device=1)
    driver.take_sent()


def test_a_member_waits_for_its_gang_and_then_all_are_granted_at_once():
    driver = Driver(tq=TQ)
    driver.register(1, name="rank0")
    join(driver, 1, rank=0)
    driver.request(1, device=0)
    assert driver.holders(0) == [] and driver.waiters(0) == [1]  # free, but the gang is not whole
    driver.register(2, name="rank1")
    join(driver, 2, rank=1)
    assert driver.holders(0) == []  # complete, but rank 1 does not want its GPU yet
    driver.request(2, device=1)
    assert (driver.holders(0), driver.holders(1)) == ([1], [2])
    assert (granted(driver, 1), granted(driver, 2)) == ([0], [1])
    assert any("grant gang 'job'" in log.text and "devices 0, 1 together" in log.text
               for log in driver.logs)


def test_a_gang_takes_turns_with_a_single_program_in_whole_quanta():
    driver = Driver(tq=TQ, grace=GRACE)
    driver.register(9, name="single")
    driver.request(9, device=0)
    gang_holding(driver)
    # GPU 1 is free, yet rank 1 does not run while rank 0 waits for GPU 0.
    assert driver.holders(1) == [] and driver.waiters(1) == [2]
    turns = []
    for _ in range(6):
        driver.advance_to_deadline()
        for cid, device in ((9, 0), (1, 0), (2, 1)):
            if any(isinstance(m, p.DropLock) for m in driver.take_sent(cid)):
                driver.release(cid, device)
                driver.request(cid, device)  # busy: asks again at once
        holding = sorted(set(driver.holders(0) + driver.holders(1)))
        turns.append(holding)
        assert holding in ([9], [1, 2]), holding
    assert turns == [[1, 2], [9], [1, 2], [9], [1, 2], [9]]
    assert driver.policy.revocations == 0


@pytest.mark.parametrize("seed", range(5))
def test_no_member_ever_runs_while_another_waits(seed):
    """Random requests, releases and drops of a 3-member gang beside two single programs on
    three GPUs: after every event, either no member runs (holds a lock it was not told to drop)
    or none waits."""
    rng = random.Random(seed)
    driver = Driver(tq=TQ, grace=GRACE)
    members = {1: 0, 2: 1, 3: 2}
    for cid in members:
        driver.register(cid)
        join(driver, cid, size=3, rank=cid - 1)
    singles = {7: 0, 8: 2}
    for cid in singles:
        driver.register(cid)
    devices = {**members, **singles}
    grants = 0
    for _ in range(600):
        cid = rng.choice(list(devices))
        device = devices[cid]
        roll = rng.random()
        if roll < 0.4:
            driver.request(cid, device)
        elif roll < 0.7 and cid in driver.holders(device):
            driver.release(cid, device, p.ReleaseReason.IDLE)
        elif roll < 0.85:
            for holder, message in driver.take_sent():
                if isinstance(message, p.DropLock):
                    driver.release(holder, message.device)
                grants += isinstance(message, p.LockGranted)
        else:
            driver.advance(rng.uniform(1, TQ))
        running = {m for m, d in members.items() if m in driver.holders(d)
                   and driver.policy.devices[d].holders[m].dropped_at is None}
        waiting = {m for m, d in members.items() if m in driver.waiters(d)}
        assert not (running and waiting), (running, waiting)
    assert grants > 20
    assert sum("grant gang" in log.text for log in driver.logs) > 3


def test_a_member_that_released_early_gets_its_gpu_back_and_nobody_else_does():
    driver = Driver(tq=TQ)
    gang_holding(driver)
    driver.register(9, name="single")
    driver.release(1, device=0, reason=p.ReleaseReason.IDLE)
    driver.request(9, device=0)
    assert driver.holders(0) == []  # kept for the gang while rank 1 still holds GPU 1
    driver.request(1, device=0)
    assert driver.holders(0) == [1]
    driver.release(1, device=0, reason=p.ReleaseReason.IDLE)
    driver.release(2, device=1, reason=p.ReleaseReason.IDLE)
    assert driver.holders(0) == [9]  # every member let go: the turn is over


def test_the_gang_is_dropped_at_its_quantum_end_for_a_waiter_on_a_gpu_it_left():
    driver = Driver(tq=TQ)
    gang_holding(driver)
    driver.release(1, device=0, reason=p.ReleaseReason.IDLE)
    driver.register(9, name="single")
    driver.request(9, device=0)
    assert driver.policy.next_deadline() == driver.now + TQ - 0  # the gang's quantum end
    driver.advance_to_deadline()
    assert [m for m in driver.take_sent(2) if isinstance(m, p.DropLock)]
    driver.release(2, device=1)
    assert driver.holders(0) == [9]


def test_a_member_that_dies_takes_its_gangs_locks_with_it_at_once():
    driver = Driver(tq=TQ)
    gang_holding(driver)
    driver.register(9, name="single")
    driver.request(9, device=1)
    driver.take_sent()
    driver.disconnect(1)
    assert [m for m in driver.take_sent(2) if isinstance(m, p.LockRevoked)]
    assert driver.holders(1) == [9]  # no grace period: the survivor's collective cannot end
    assert any("a member left, so the gang is broken" in text for text in warnings(driver))
    driver.request(2, device=0)
    assert driver.holders(0) == [2]  # on its own now: it need not wait for anyone
    # The processes of a restarted job form a new gang under the same name.
    for cid in (3, 4):
        driver.register(cid)
        join(driver, cid, rank=cid - 3)
    assert driver.policy.gangs.of(3) is driver.policy.gangs.of(4) is not None
    assert driver.policy.gangs.of(2) is None
    assert [gang.state for gang in driver.policy.gangs] == ["broken", "complete"]


def test_a_gang_that_never_fills_runs_member_by_member_after_the_timeout():
    driver = Driver(tq=TQ, gang_timeout_s=5.0)
    driver.register(1)
    join(driver, 1, size=3)
    driver.register(2)
    join(driver, 2, size=3, rank=1)
    driver.request(1, device=0)
    assert driver.holders(0) == []
    assert driver.policy.next_deadline() == driver.now + 5.0
    driver.advance_to_deadline()
    assert driver.holders(0) == [1]
    assert any("not complete 5 s after" in text for text in warnings(driver))
    driver.request(2, device=0)
    assert driver.waiters(0) == [2]  # one by one now, as clients without a gang


def test_a_member_naming_another_size_breaks_the_gang():
    driver = Driver(tq=TQ)
    driver.register(1)
    join(driver, 1, size=2)
    driver.request(1, device=0)
    driver.register(2)
    join(driver, 2, size=4, rank=1)
    assert any("names size 4, the gang's first member 2" in text for text in warnings(driver))
    assert driver.holders(0) == [1]  # broken: scheduled on its own at once


def test_another_users_process_cannot_join_a_gang():
    driver = Driver(tq=TQ)
    gang_of_two(driver, uid=1000)
    driver.register(5, uid=2000)
    join(driver, 5, rank=1)
    gangs = {(gang.uid, gang.name): sorted(gang.members) for gang in driver.policy.gangs}
    assert gangs == {(1000, "job"): [1, 2], (2000, "job"): [5]}


def test_members_on_one_gpu_hold_it_together():
    driver = Driver(tq=TQ)
    driver.register(1)
    join(driver, 1)
    driver.register(2)
    join(driver, 2, rank=1)
    driver.request(1, device=0)
    driver.request(2, device=0)
    assert sorted(driver.holders(0)) == [1, 2]
    assert not [m for m in driver.take_sent(1) if isinstance(m, p.DropLock)]
    flags = [m.flags for m in driver.take_sent(2) if isinstance(m, p.LockGranted)]
    assert flags and flags[0] & p.GRANT_SHARED


def test_a_member_asking_for_a_gpu_someone_else_holds_ends_the_turn():
    driver = Driver(tq=TQ)
    driver.register(9, name="single")
    driver.request(9, device=2)
    gang_holding(driver)
    driver.request(1, device=2)
    assert [m for m in driver.take_sent(1) if isinstance(m, p.DropLock)]
    assert [m for m in driver.take_sent(2) if isinstance(m, p.DropLock)]


def test_bad_gang_messages_are_refused_without_harm():
    driver = Driver(tq=TQ)
    driver.register(1)
    join(driver, 1, size=1)
    assert any("2 to 64 members" in text for text in warnings(driver))
    join(driver, 1, name="", size=2)
    assert driver.policy.gangs.of_client == {}
    driver.request(1)
    join(driver, 1)
    assert driver.closed and "before the client's first REQUEST_LOCK" in driver.closed[-1].reason
    driver.register(2)
    join(driver, 2)
    join(driver, 2)
    assert "once per connection" in driver.closed[-1].reason


def test_status_shows_each_gang_its_members_and_turn():
    driver = Driver(tq=TQ)
    gang_of_two(driver)
    driver.register(9, name="single")
    driver.request(1, device=0)
    status = build_status(driver.policy, driver.now, 0.0, grace_ms=10_000)
    (gang,) = status["gangs"]
    assert gang == {"name": "job", "uid": 1000, "size": 2, "world_size": 2, "state": "complete",
                    "members": [{"client": 1, "rank": 0}, {"client": 2, "rank": 1}],
                    "turn_devices": None, "turn_left_s": None}
    driver.request(2, device=1)
    driver.advance(5)
    status = build_status(driver.policy, driver.now, 0.0, grace_ms=10_000)
    assert status["gangs"][0]["turn_devices"] == [0, 1]
    assert status["gangs"][0]["turn_left_s"] == TQ - 5
    assert [c["gang"] for c in status["clients"]] == ["job", "job", None]


def test_status_lists_every_device_a_client_holds_or_waits_for():
    driver = Driver(tq=TQ)
    driver.register(1)
    driver.register(2)
    driver.request(1, device=0)
    driver.request(1, device=1)
    driver.request(2, device=1)
    clients = {c["id"]: c for c in build_status(driver.policy, driver.now, 0.0,
                                                grace_ms=10_000)["clients"]}
    assert clients[1]["devices"] == {"holding": [0, 1], "waiting": []}
    assert clients[2]["devices"] == {"holding": [], "waiting": [1]}
