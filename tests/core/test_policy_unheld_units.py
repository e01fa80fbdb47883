"""Mixed kinds on one GPU (core/rules/unheld.py): a container that holds no memory units where
others do is limited to what their units leave, one that holds no compute units where others do
weighs what theirs leave, and a new reading of the node's units re-sends the terms."""

from __future__ import annotations

import pytest
from policy_driver import Driver
from share_simulation import Program, Simulation

from gemshare_nvs import protocol as p
from gemshare_nvs.config.parsing import Names, parse
from gemshare_nvs.core.model.container import GpuUnits, HeldUnits, NodeIdentity
from gemshare_nvs.core.rules.budgets import BUDGET_REPORT_S, KUBELET_SOURCE
from gemshare_nvs.core.rules.unheld import MIN_MEMORY_BYTES, MIN_WEIGHT
from gemshare_nvs.observe.status import build_status

GIB = 1 << 30
GPU = "GPU-11111111-2222-3333-4444-555555555555"
OTHER_GPU = "GPU-99999999-2222-3333-4444-555555555555"
HOLDER, SLOTS, LEFTOVER = "a" * 64, "b" * 64, "c" * 64  # container IDs


def on_gpu(**options) -> Driver:
    """A scheduler whose NVML names one 80 GiB GPU."""
    return Driver(nvml={0: 80 * GIB}, nvml_uuids={GPU: 0}, **options)


def container(container_id: str, memory_gib: int = 0, compute: int = 0) -> NodeIdentity:
    """A container of the node with those units on GPU (none at all: slots only)."""
    units = (GpuUnits(GPU, memory_gib, memory_gib * GIB, compute),) if memory_gib or compute \
        else ()
    return NodeIdentity(container_id, f"pod-{container_id[0]}", "ml", "main", "uid", units)


def reading(memory_gib: int = 0, compute: int = 0, containers: int = 1) -> tuple:
    return (HeldUnits(GPU, memory_gib * GIB, compute, containers),)


def rules(text: str):
    return parse(text, "/etc/gemshare/gemshare.toml", Names()).terms


def limits_to(driver: Driver, cid: int) -> list[p.Limits]:
    return [m for m in driver.take_sent(cid) if isinstance(m, p.Limits)]


def read(driver: Driver, held: tuple) -> list:
    return driver._take(driver.policy.node_units(held, driver.now))


def weight(driver: Driver, cid: int) -> float:
    return driver.policy.budget_rules.share_weight(cid, 0)


# ----- compute --------------------------------------------------------------------------------

@pytest.mark.parametrize("held, share", [(95, 0.5 / 10), (80, 2 / 10)])
def test_a_compute_less_container_has_the_share_the_units_left_give_it(held, share):
    """A container of `held` compute units and one of memory units alone, both busy for an
    hour: the second holds the GPU for what is left (95 held: 0.5 against 9.5, where it weighed
    1 before), not as 10 units."""
    driver = on_gpu()
    read(driver, reading(memory_gib=8, compute=held, containers=2))
    simulation = Simulation(driver)
    holder, leftover = Program(1), Program(2)
    simulation.add(holder, node=container(HOLDER, compute=held))
    simulation.add(leftover, node=container(LEFTOVER, memory_gib=8))
    assert driver.policy.clients[2].terms.weight == pytest.approx((100 - held) / 10)
    simulation.run(60 * 60)
    assert leftover.held / (holder.held + leftover.held) == pytest.approx(share, rel=0.15)


def test_what_is_left_is_split_among_the_compute_less_containers_that_want_the_gpu():
    driver = on_gpu()
    read(driver, reading(compute=90, containers=1))
    driver.register(1, node=container(SLOTS))
    driver.register(2, node=container(LEFTOVER, memory_gib=4))
    driver.register(3, node=container(LEFTOVER, memory_gib=4))  # a sibling of 2
    assert [driver.policy.clients[c].terms.source("weight") for c in (1, 2)] == \
        [KUBELET_SOURCE] * 2
    driver.request(1)
    assert weight(driver, 1) == 1.0  # alone of them: all that is left
    driver.request(2)
    driver.request(3)
    assert [weight(driver, c) for c in (1, 2, 3)] == [0.5, 0.25, 0.25]


def test_a_compute_less_container_weighs_at_least_the_floor():
    driver = on_gpu()
    read(driver, reading(compute=100))
    driver.register(1, node=container(SLOTS))
    driver.request(1)
    assert weight(driver, 1) == MIN_WEIGHT


def test_where_nobody_holds_compute_units_a_container_without_them_weighs_one():
    driver = on_gpu()
    read(driver, reading(memory_gib=60))
    driver.register(1, node=container(LEFTOVER, memory_gib=8))
    driver.register(2, node=container(SLOTS))
    terms = [driver.policy.clients[c].terms for c in (1, 2)]
    assert [t.weight for t in terms] == [1.0, 1.0]
    assert terms[1].source("weight") == "default"  # as before: no term from the units


def test_a_rule_weight_still_wins_over_what_is_left():
    driver = on_gpu(rules=rules('[[rule]]\nmatch = { namespace = "ml" }\nweight = 3\n'))
    read(driver, reading(compute=90))
    driver.register(1, node=container(SLOTS))
    driver.request(1)
    assert weight(driver, 1) == 3.0


# ----- memory ---------------------------------------------------------------------------------

def test_a_memory_less_container_is_limited_to_what_the_memory_units_leave():
    driver = on_gpu()
    read(driver, reading(memory_gib=60, compute=30, containers=1))
    driver.register(1, node=container(LEFTOVER, compute=30))
    assert driver.take_sent(1)[0] == p.Limits(20 * GIB, 0)
    assert driver.policy.clients[1].terms.source("memory_limit") == KUBELET_SOURCE


def test_the_containers_without_memory_units_share_what_is_left_as_one_limit():
    driver = on_gpu()
    read(driver, reading(memory_gib=60))
    driver.register(1, node=container(SLOTS))
    driver.register(2, node=container(LEFTOVER, compute=10))
    driver.register(3, node=container(HOLDER, memory_gib=60))  # the units' own holder
    assert [limits_to(driver, c) for c in (1, 2, 3)] == \
        [[p.Limits(20 * GIB, 0)], [p.Limits(20 * GIB, 0)], [p.Limits(60 * GIB, 0)]]
    driver.advance(BUDGET_REPORT_S)
    driver.mem(1, 15 * GIB)
    # The other memory-less container is told; the memory-unit holder's budget is its own.
    assert (limits_to(driver, 2), limits_to(driver, 3)) == ([p.Limits(20 * GIB, 15 * GIB)], [])
    driver.advance(BUDGET_REPORT_S)
    driver.disconnect(1)
    assert limits_to(driver, 2) == [p.Limits(20 * GIB, 0)]


def test_a_memory_less_program_past_what_is_left_is_logged_once():
    driver = on_gpu()
    read(driver, reading(memory_gib=70))
    driver.register(1, node=container(SLOTS))
    driver.register(2, node=container(LEFTOVER))
    driver.mem(1, 6 * GIB)
    driver.mem(2, 6 * GIB)
    driver.mem(2, 7 * GIB)
    over = [log.text for log in driver.logs if "past its 10240 MiB" in log.text]
    assert len(over) == 1 and "what the memory units leave" in over[0]


def test_a_rule_cannot_lift_what_is_left_but_may_lower_it():
    driver = on_gpu(rules=rules(
        '[[rule]]\nmatch = { pod = "pod-c" }\nmemory_limit = "4GiB"\n'
        '[[rule]]\nmatch = { namespace = "ml" }\nmemory_limit = "40GiB"\n'))
    read(driver, reading(memory_gib=70))
    driver.register(1, node=container(SLOTS))
    assert driver.policy.clients[1].terms.memory_limit == 10 * GIB
    driver.register(2, node=container(LEFTOVER))
    assert driver.policy.clients[2].terms.memory_limit == 4 * GIB


def test_when_the_memory_units_hold_the_whole_gpu_nothing_is_left():
    driver = on_gpu()
    read(driver, reading(memory_gib=90))  # overcommitted
    driver.register(1, node=container(SLOTS))
    assert driver.take_sent(1)[0] == p.Limits(MIN_MEMORY_BYTES, 0)


def test_a_view_only_program_sees_what_is_left():
    driver = on_gpu()
    read(driver, reading(memory_gib=60))
    driver.register(1, node=container(SLOTS), flags=p.REG_VIEW_ONLY)
    assert driver.take_sent(1)[0] == p.Limits(20 * GIB, 0)
    assert driver.policy.clients == {}


def test_a_program_outside_pods_is_as_before():
    driver = on_gpu()
    read(driver, reading(memory_gib=60, compute=90))
    driver.register(1)
    terms = driver.policy.clients[1].terms
    assert (terms.memory_limit, terms.weight) == (None, 1.0)
    assert limits_to(driver, 1) == []


def test_a_slot_only_program_on_a_gpu_the_scheduler_cannot_name_yet_takes_it_once_named():
    driver = Driver(nvml={0: 80 * GIB})  # no UUIDs from NVML: the program says its GPU
    read(driver, reading(memory_gib=60))
    driver.register(1, node=container(SLOTS))
    assert limits_to(driver, 1) == []
    driver.uuid(1, GPU)
    read(driver, reading(memory_gib=60))  # the next reading: the GPU is known now
    assert limits_to(driver, 1) == [p.Limits(20 * GIB, 0)]


# ----- readings -------------------------------------------------------------------------------

def test_a_changed_reading_sends_limits_and_terms_again():
    driver = on_gpu()
    driver.register(1, node=container(LEFTOVER, compute=20))
    assert limits_to(driver, 1) == []  # no reading yet: as before
    read(driver, reading(memory_gib=60, compute=20, containers=1))
    assert limits_to(driver, 1) == [p.Limits(20 * GIB, 0)]
    read(driver, reading(memory_gib=60, compute=20, containers=1))  # the same: nothing sent
    assert limits_to(driver, 1) == []
    read(driver, reading(memory_gib=70, compute=20, containers=2))
    assert limits_to(driver, 1) == [p.Limits(10 * GIB, 0)]
    read(driver, reading(compute=20))  # the memory units are gone: no limit
    assert limits_to(driver, 1) == [p.Limits(0, 0)]
    assert driver.policy.clients[1].terms.memory_limit is None


def test_a_changed_reading_gives_a_waiting_program_its_new_weight():
    driver = on_gpu()
    driver.register(1, node=container(SLOTS))
    driver.request(1)
    assert weight(driver, 1) == 1.0
    read(driver, reading(compute=98))
    assert weight(driver, 1) == pytest.approx(0.2)
    assert any("terms" in log.text and "weight 0.2" in log.text for log in driver.logs)


def test_a_gpu_nobody_names_and_a_gpu_listed_twice_are_logged_and_lose_nothing():
    driver = on_gpu()
    driver.register(1, node=container(SLOTS))
    read(driver, (HeldUnits(OTHER_GPU, 8 * GIB, 10, 1), HeldUnits(GPU, 60 * GIB, 0, 1),
                  HeldUnits(GPU, 1 * GIB, 0, 1)))
    warnings = [log.text for log in driver.logs if log.warning]
    assert any(OTHER_GPU in text and "unknown to the scheduler" in text for text in warnings)
    assert any("listed twice" in text for text in warnings)
    assert limits_to(driver, 1) == [p.Limits(20 * GIB, 0)]  # the GPU it is on still counts


def test_status_shows_what_each_gpu_leaves():
    driver = on_gpu()
    read(driver, (*reading(memory_gib=60, compute=90, containers=2),
                  HeldUnits(OTHER_GPU, 0, 30, 1)))
    status = build_status(driver.policy, driver.now, 0.0, grace_ms=10_000)
    assert status["unheld"] == [
        {"gpu_uuid": GPU, "device": 0, "containers": 2, "memory_held_bytes": 60 * GIB,
         "memory_unheld_bytes": 20 * GIB, "compute_held_units": 90, "compute_unheld_units": 10},
        {"gpu_uuid": OTHER_GPU, "device": None, "containers": 1, "memory_held_bytes": 0,
         "memory_unheld_bytes": None, "compute_held_units": 30, "compute_unheld_units": 70}]
