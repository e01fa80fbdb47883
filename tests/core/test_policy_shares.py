"""Usage-aware grants (policy.py, shares.py): a program under its share gets the device after a
minimum slice, equally busy ones take whole turns, weights set the lock time, limits pause."""

import random
import statistics

import pytest
from policy_driver import Driver
from share_simulation import Program, Simulation

from gemshare_nvs import protocol as p
from gemshare_nvs.core.model.terms import Terms
from gemshare_nvs.core.rules.cost import Link
from gemshare_nvs.core.rules.shares import SWITCH_MULTIPLE
from gemshare_nvs.observe.status import build_status

G = 1 << 30


def last_drop(driver: Driver) -> dict:
    status = build_status(driver.policy, driver.now, 0.0, grace_ms=1000)
    return status["devices"][0]["last_drop"]


def test_a_waiter_under_its_share_takes_the_device_from_a_long_holder_at_once():
    driver = Driver(tq=30)
    driver.register(1)
    driver.register(2)
    driver.request(1)
    driver.advance(10)
    driver.take_sent()
    driver.request(2)
    assert driver.take_sent() == [(1, p.DropLock(0))]
    driver.advance(0.05)  # its queued work drains
    driver.release(1)
    assert driver.take_sent() == [(2, p.LockGranted(0, p.GRANT_AFTER_WAIT, 30_000))]
    assert last_drop(driver) == {"client": 1, "reason": "share"}


def test_a_holder_just_granted_runs_the_minimum_slice_first():
    driver = Driver(tq=30, min_slice_ms=400)
    driver.register(1)
    driver.register(2)
    driver.request(1)
    driver.advance(20)
    driver.release(1, reason=p.ReleaseReason.IDLE)
    driver.request(1)  # granted at once, with 20 s of usage behind it
    driver.advance(0.1)
    driver.take_sent()
    driver.request(2)
    assert driver.take_sent() == []
    assert driver.policy.next_deadline() == pytest.approx(driver.now + 0.3)
    driver.advance_to_deadline()
    assert driver.take_sent() == [(1, p.DropLock(0))]


def test_a_waiter_as_busy_as_the_holder_waits_for_the_quantum():
    driver = Driver(tq=30)
    driver.register(1)
    driver.register(2)
    driver.request(1)
    driver.advance(20)
    driver.request(2)  # a newcomer: under its share
    driver.release(1)
    driver.request(1)  # client 2 holds, client 1 asks again at once: it is the busier one
    driver.take_sent()
    driver.advance(29.9)
    assert driver.take_sent() == []
    driver.advance(0.1)
    assert driver.take_sent() == [(2, p.DropLock(0))]
    assert last_drop(driver) == {"client": 1, "reason": "share"}  # not answered yet
    driver.release(2)
    assert last_drop(driver) == {"client": 2, "reason": "quantum"}


def test_equally_busy_programs_take_turns_of_a_whole_quantum():
    driver = Driver(tq=10)
    simulation = Simulation(driver, [Program(1), Program(2), Program(3)])
    simulation.run(400)
    for program in simulation.programs.values():
        assert program.waits[1:] == pytest.approx([20.0] * (len(program.waits) - 1))
    assert [log.text for log in driver.logs if log.text.startswith("share")] == []


@pytest.mark.parametrize("count", range(2, 9))
def test_lock_time_follows_the_weights_within_five_percent(count):
    weights = [1 + 0.5 * i for i in range(count)]  # all different: 1 to 4.5
    random.Random(count).shuffle(weights)  # in no particular order of arrival
    simulation = Simulation(Driver(tq=30))
    programs = [Program(cid) for cid in range(1, count + 1)]
    for program, weight in zip(programs, weights):
        simulation.add(program, {"weight": weight})
    simulation.run(60 * 60)
    total_held, total_weight = sum(pr.held for pr in programs), sum(weights)
    for program, weight in zip(programs, weights):
        assert program.held / total_held == pytest.approx(weight / total_weight, rel=0.05), \
            (weights, [round(pr.held) for pr in programs])


def beside_a_trainer(driver: Driver) -> tuple[Program, Program]:
    """A busy program alone for 20 s, then 300 s beside one with 0.43 s bursts 2 s apart."""
    trainer, bursty = Program(1), Program(2, burst=0.43, sleep=2.0)
    simulation = Simulation(driver, [trainer])
    simulation.run(20)
    simulation.add(bursty)
    simulation.run(300)
    return trainer, bursty


def test_a_bursty_program_beside_a_busy_one_waits_about_the_drain():
    driver = Driver(tq=30)
    trainer, bursty = beside_a_trainer(driver)
    assert len(bursty.waits) > 50
    assert max(bursty.waits) <= driver.policy.min_slice_ms / 1000
    assert statistics.median(bursty.bursts) == pytest.approx(0.43, abs=0.01)
    assert trainer.held / 320 > 0.7


def test_the_same_pair_waits_for_whole_quanta_when_the_bursty_one_is_not_under_its_share():
    driver = Driver(tq=30)
    trainer, bursty = Program(1), Program(2, burst=0.43, sleep=2.0)
    simulation = Simulation(driver, [trainer])
    simulation.run(20)
    simulation.add(bursty, {"weight": 0.01})  # its weighted usage is never under the trainer's
    simulation.run(300)
    assert statistics.median(bursty.waits) > 10
    # Only its first request, before it has any usage at all, claims the device.
    assert len([log for log in driver.logs if log.text.startswith("share")]) == 1


def test_the_minimum_slice_grows_with_what_the_switch_would_move():
    driver = Driver(tq=60, mode=p.Mode.AUTO, nvml={0: 24 * G}, reserve=0, min_slice_ms=300)
    driver.policy.links[0] = link = Link()
    link.record(True, 8 * G, 1.0)   # 8 GiB/s out
    link.record(False, 8 * G, 0.5)  # 16 GiB/s back
    for cid, size in ((1, 16 * G), (2, 16 * G)):
        driver.register(cid)
        driver.mem(cid, size)
    driver.request(1)
    driver.advance(0.5)
    driver.take_sent()
    driver.request(2)  # fresh, so under its share; the switch moves about 8.4 GiB each way
    assert driver.take_sent() == []
    out = driver.policy.room_rules.room_for(driver.policy.devices[0], [2], 1)
    expected = SWITCH_MULTIPLE * link.switch_seconds(out, out)
    assert expected > 1.0
    assert driver.policy.next_deadline() == pytest.approx(100 + expected)
    driver.advance_to_deadline()
    assert [type(m) for _, m in driver.take_sent()] == [p.DropLock]


def test_a_waiter_passes_busier_ones_only_while_the_first_has_waited_under_a_quantum():
    driver = Driver(tq=10)
    for cid in (1, 2, 3, 4):
        driver.register(cid)
    driver.request(1)
    driver.advance(10)
    driver.request(2)
    driver.advance_to_deadline()
    driver.release(1)
    driver.request(1)  # client 2 holds, client 1 (busy) waits
    driver.advance(1)
    driver.request(3)  # fresh: it passes client 1, which has waited 1 s
    assert driver.waiters() == [3, 1]
    driver.advance_to_deadline()  # client 2 is dropped for client 3
    driver.release(2)
    assert driver.holders() == [3]
    driver.request(2)
    driver.advance(10)  # client 1 has now waited more than a quantum
    driver.request(4)
    assert driver.waiters() == [1, 2, 4]


def test_a_waiter_is_passed_only_in_its_first_quantum_even_behind_one_that_passed_it():
    driver = Driver(tq=10, grace=30)  # nobody answers a drop here: the queue stays as it is
    for cid in (1, 2, 3, 4):
        driver.register(cid)
    for cid, held in ((1, 40), (2, 4)):  # client 1 has had the most time, client 2 some
        driver.request(cid)
        driver.advance(held)
        driver.release(cid, reason=p.ReleaseReason.IDLE)
    driver.request(3)  # holds, fresh
    driver.request(1)  # waits: busier than the holder
    driver.advance(9)
    driver.request(2)  # under client 1's share, which has waited 9 s: passes it
    assert driver.waiters() == [2, 1]
    driver.advance(3)
    # Client 4 is under both, and client 2 has waited only 3 s; but client 1 has waited 12 s,
    # more than a quantum, so nobody new goes ahead of it.
    driver.request(4)
    assert driver.waiters() == [2, 1, 4]


def test_a_gpu_limit_keeps_a_lone_client_to_its_fraction():
    driver = Driver(tq=30)
    program = Program(1)
    simulation = Simulation(driver)
    simulation.add(program, {"gpu_limit": 0.4})
    simulation.run(600)
    early = program.held
    simulation.run(1800)
    assert (program.held - early) / 1800 == pytest.approx(0.4, rel=0.05)
    assert last_drop(driver) == {"client": 1, "reason": "gpu_limit"}
    assert any("gpu limit 0.4 reached" in log.text for log in driver.logs)


def test_a_holder_that_releases_early_leaves_idle_as_the_last_drop():
    driver = Driver(tq=30)
    driver.register(1)
    driver.register(2)
    driver.request(1)
    driver.request(2)  # as busy as client 1 when it asks: it waits for the quantum or a release
    driver.advance(5)
    driver.release(1, reason=p.ReleaseReason.IDLE)
    assert driver.holders() == [2]
    assert last_drop(driver) == {"client": 1, "reason": "idle"}
    assert driver.policy.snapshot(driver.now).devices[0].last_end == (1, "idle")
    driver.release(2, reason=p.ReleaseReason.IDLE)  # nobody waits: the device is free, and
    assert last_drop(driver) == {"client": 2, "reason": "idle"}  # status still says why


def test_a_dropped_holder_that_answers_as_idle_leaves_the_drops_reason():
    driver = Driver(tq=10)
    driver.register(1)
    driver.register(2)
    driver.request(1)
    driver.request(2)
    driver.advance_to_deadline()
    driver.release(1, reason=p.ReleaseReason.IDLE)  # it was going idle as the drop came
    assert last_drop(driver) == {"client": 1, "reason": "quantum"}
    driver.release(2, reason=p.ReleaseReason.DROPPED)  # a release nobody asked for
    assert last_drop(driver) == {"client": 2, "reason": "released"}


def test_after_a_tick_no_deadline_is_already_due():
    driver = Driver(tq=5)
    simulation = Simulation(driver, [Program(1), Program(2, burst=0.3, sleep=0.7),
                                     Program(3, burst=2.0, sleep=0.1)])
    driver.policy.override(4003, {"gpu_limit": 0.3, "weight": 2}, driver.now)
    for _ in range(2000):
        simulation.run(0.37)
        deadline = driver.policy.next_deadline()
        assert deadline is None or deadline > driver.now


def test_a_light_weight_gets_a_shorter_quantum_beside_a_heavier_waiter():
    driver = Driver(tq=30)
    driver.register(1)
    driver.register(2)
    driver.policy.override(4002, {"weight": 3}, driver.now)
    driver.request(1)
    driver.advance(40)
    driver.release(1, reason=p.ReleaseReason.IDLE)
    driver.advance(100)
    driver.request(2)
    driver.request(1)
    driver.advance_to_deadline()
    driver.release(2)
    driver.request(2)  # the heavier one waits: the light one's turn is a third of the TQ
    granted_at = driver.now
    driver.take_sent()
    driver.advance_to_deadline()
    assert driver.take_sent() == [(1, p.DropLock(0))]
    assert driver.now == pytest.approx(granted_at + 10)


def test_rules_set_terms_at_registration_and_again_on_reload():
    notebook = Terms().with_values({"weight": 2, "memory_limit": 4 * G}, "config rule 1 (x:3)")
    driver = Driver(rules=lambda who: notebook if who.label == "notebook" else Terms())
    driver.register(1, label="notebook")
    driver.register(2)
    assert driver.take_sent() == [(1, p.Limits(4 * G)), (1, p.Registered(1, p.Mode.ON, 30)),
                                  (2, p.Registered(2, p.Mode.ON, 30))]
    driver._take(driver.policy.set_rules(lambda who: Terms(), driver.now))
    assert driver.take_sent() == [(1, p.Limits(0))]
    status = build_status(driver.policy, driver.now, 0.0, grace_ms=1000)
    first = status["clients"][0]
    assert (first["label"], first["weight"], first["memory_limit"]) == ("notebook", 1.0, None)
    assert first["terms_from"]["weight"] == "default"


def test_overrides_stay_on_top_of_the_rules_until_reset():
    driver = Driver(rules=lambda who: Terms().with_values({"weight": 2}, "config rule 1 (x:3)"))
    driver.register(1)
    driver._take(driver.policy.override(4001, {"weight": 5, "gpu_limit": 0.5}, driver.now))
    driver._take(driver.policy.set_rules(
        lambda who: Terms().with_values({"weight": 3}, "config rule 2 (x:9)"), driver.now))
    terms = driver.policy.clients[1].terms
    assert (terms.weight, terms.gpu_limit, terms.source("weight")) == (5, 0.5, "gemsharectl")
    driver._take(driver.policy.override(4001, {}, driver.now, reset=True))
    terms = driver.policy.clients[1].terms
    assert (terms.weight, terms.gpu_limit, terms.source("weight")) == (3, None,
                                                                       "config rule 2 (x:9)")
    with pytest.raises(LookupError, match="pid 999"):
        driver.policy.override(999, {"weight": 2}, driver.now)


def test_status_shows_usage_slices_and_turns():
    driver = Driver(tq=30)
    driver.register(1)
    driver.request(1)
    driver.advance(12)
    status = build_status(driver.policy, driver.now, 0.0, grace_ms=1000)
    device, client = status["devices"][0], status["clients"][0]
    assert device["slices_s"] == {"1": 12.0} and device["turns_s"] == {"1": 30.0}
    assert client["usage_s"]["0"] == pytest.approx(43.28 * (1 - 2 ** (-12 / 30)), abs=0.01)
    assert status["min_slice_ms"] == 300 and status["usage_half_life_s"] == 30.0


def granted_within(driver: Driver, cid: int, seconds: float, step: float = 0.01) -> float:
    """How long `cid`, waiting now, waits for its grant, the clock stepping by `step` and every
    drop answered at once; fails past `seconds`."""
    waited = 0.0
    while cid not in driver.holders():
        assert waited < seconds, (cid, driver.holders(), driver.waiters())
        driver.advance(step)
        waited += step
        for holder in driver.holders():
            if any(isinstance(m, p.DropLock) for m in driver.take_sent(holder)):
                driver.release(holder, reason=p.ReleaseReason.DROPPED)
                driver.request(holder)  # a trainer asks again at once
    return waited


def test_each_program_of_a_class_waits_a_slice_at_most_beside_a_trainer():
    """A trainer that has held for a while, and three programs under their share asking within
    0.1 s: the trainer, whose turns are cut short rather than given back, is passed by every one
    of them, so each is granted after the one before it, not after the trainer's next turn."""
    driver = Driver(tq=5)
    for cid in (1, 2, 3, 4):
        driver.register(cid)
    driver.request(1)
    driver.advance(10)
    driver.request(2)
    assert granted_within(driver, 2, 0.5) < 0.5
    driver.advance(0.05)
    driver.request(3)
    driver.advance(0.05)
    driver.request(4)
    assert driver.waiters() == [3, 4, 1]
    driver.release(2, reason=p.ReleaseReason.IDLE)
    assert driver.holders() == [3]
    driver.release(3, reason=p.ReleaseReason.IDLE)
    assert driver.holders() == [4]


def test_a_program_granted_behind_a_trainer_has_it_drop_after_a_slice():
    """Whoever is first when a busier holder is granted weighs its claim then, not only when it
    asked: it waits a minimum slice, not the holder's quantum."""
    driver = Driver(tq=5)
    for cid in (1, 2, 3):
        driver.register(cid)
    driver.request(1)
    driver.advance(10)
    driver.request(2)
    granted_within(driver, 2, 0.5)  # the trainer, 1, asks again at once
    driver.advance(5.0)  # 2's quantum ends: dropped, it has not answered yet
    assert any(isinstance(m, p.DropLock) for m in driver.take_sent(2))
    driver.request(3)  # behind the trainer, which has waited a quantum: nobody passes it now
    assert driver.waiters() == [1, 3]
    driver.release(2, reason=p.ReleaseReason.DROPPED)
    assert driver.holders() == [1]
    assert granted_within(driver, 3, 5.0) <= 0.3 + 0.02
