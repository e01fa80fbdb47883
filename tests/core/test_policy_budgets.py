"""A Kubernetes container's units as one budget for its programs (core/rules/budgets.py): what
the units become, their precedence with rules and gemsharectl, LIMITS' budget_used, and
REG_VIEW_ONLY registrations kept out of sight."""

from __future__ import annotations

import pytest
from policy_driver import Driver
from share_simulation import Program, Simulation

from gemshare_nvs import protocol as p
from gemshare_nvs.config.parsing import Names, parse
from gemshare_nvs.core.model.container import (
    CAP_GPU_LIMIT,
    CAP_OFF,
    CAP_SM_SHARE,
    GpuUnits,
    NodeIdentity,
)
from gemshare_nvs.core.model.terms import Terms
from gemshare_nvs.core.rules.budgets import (
    BUDGET_REPORT_S,
    KUBELET_SOURCE,
    budget_used,
    composed,
    unit_terms,
)

GIB = 1 << 30
GPU = "GPU-11111111-2222-3333-4444-555555555555"
OTHER_GPU = "GPU-99999999-2222-3333-4444-555555555555"
RULE = "config rule 1 (/etc/gemshare/gemshare.toml:3)"


def node(memory_gib: int = 0, compute: int = 0, container_id: str = "a" * 64,
         pod: str = "train-0", container: str = "main", gpus=None) -> NodeIdentity:
    units = gpus if gpus is not None else \
        (GpuUnits(GPU, memory_gib, memory_gib * GIB, compute),)
    return NodeIdentity(container_id, pod, "ml", container, "uid-1", units)


def limits_to(driver: Driver, cid: int) -> list[p.Limits]:
    return [m for m in driver.take_sent(cid) if isinstance(m, p.Limits)]


def ruled(**values) -> Terms:
    return Terms().with_values(values, RULE)


# ----- what units become, and precedence ---------------------------------------------------

def test_memory_units_alone_give_a_limit_and_the_weight_of_ten_compute_units():
    units = GpuUnits(GPU, 8, 8 * GIB, 0)
    assert unit_terms(units, 1, CAP_OFF) == {"memory_limit": 8 * GIB, "weight": 1.0}
    assert unit_terms(units, 2, CAP_GPU_LIMIT) == {"memory_limit": 8 * GIB, "weight": 1.0}


def test_compute_units_give_the_container_weight_and_the_chosen_cap_split_among_its_programs():
    units = GpuUnits(GPU, 0, 0, 30)
    assert unit_terms(units, 1, CAP_OFF) == {"weight": 3.0}
    assert unit_terms(units, 3, CAP_OFF) == {"weight": 3.0}
    assert unit_terms(units, 2, CAP_GPU_LIMIT) == {"weight": 3.0, "gpu_limit": 0.15}
    assert unit_terms(units, 2, CAP_SM_SHARE) == {"weight": 3.0, "sm_share": 30}


def test_a_rule_wins_a_limit_only_where_it_is_stricter_and_always_the_weight():
    kubelet = {"memory_limit": 8 * GIB, "weight": 3.0, "gpu_limit": 0.3}
    terms = composed(kubelet, ruled(memory_limit=4 * GIB, gpu_limit=0.5, weight=2.0), {})
    assert (terms.memory_limit, terms.gpu_limit, terms.weight) == (4 * GIB, 0.3, 2.0)
    assert (terms.source("memory_limit"), terms.source("gpu_limit"), terms.source("weight")) == \
        (RULE, KUBELET_SOURCE, RULE)
    looser = composed(kubelet, ruled(memory_limit=16 * GIB), {})
    assert (looser.memory_limit, looser.source("memory_limit")) == (8 * GIB, KUBELET_SOURCE)


def test_gemsharectl_wins_but_never_takes_memory_past_the_container_budget():
    kubelet = {"memory_limit": 8 * GIB, "weight": 3.0, "gpu_limit": 0.3}
    lifted = composed(kubelet, Terms(), {"memory_limit": None, "gpu_limit": None, "weight": 5.0})
    assert (lifted.memory_limit, lifted.source("memory_limit")) == (8 * GIB, KUBELET_SOURCE)
    assert (lifted.gpu_limit, lifted.weight, lifted.source("weight")) == (None, 5.0,
                                                                           "gemsharectl")
    tighter = composed(kubelet, Terms(), {"memory_limit": 2 * GIB})
    assert (tighter.memory_limit, tighter.source("memory_limit")) == (2 * GIB, "gemsharectl")


def test_without_units_the_rules_and_overrides_are_as_they_were():
    rule = Terms(mps=False, weight=2.0)  # a rule function may build its terms directly
    assert composed({}, rule, {}) == rule
    assert composed({}, rule, {"weight": 4.0}) == rule.with_values({"weight": 4.0},
                                                                  "gemsharectl")


def test_budget_used_leaves_a_program_the_smaller_of_its_own_limit_and_what_the_others_left():
    assert budget_used(8 * GIB, 8 * GIB, 3 * GIB) == 3 * GIB  # 5 GiB left to it
    assert budget_used(4 * GIB, 8 * GIB, 3 * GIB) == 0  # its own 4 GiB binds first
    assert budget_used(4 * GIB, 8 * GIB, 6 * GIB) == 2 * GIB  # 2 GiB left in the budget
    assert budget_used(4 * GIB, None, 6 * GIB) == 0  # no budget: a limit of its own only
    assert budget_used(None, 8 * GIB, 6 * GIB) == 0


# ----- the policy ------------------------------------------------------------------------------

def test_two_programs_of_a_container_share_one_memory_budget():
    driver = Driver()
    identity = node(memory_gib=8)
    driver.register(1, node=identity)
    first = driver.take_sent(1)
    assert first[:2] == [p.Limits(8 * GIB, 0), p.Registered(1, p.Mode.ON, 30)]
    driver.register(2, node=identity)
    assert driver.take_sent(2)[0] == p.Limits(8 * GIB, 0)
    driver.advance(BUDGET_REPORT_S)
    driver.mem(1, 3 * GIB)
    assert limits_to(driver, 2) == [p.Limits(8 * GIB, 3 * GIB)]  # at once: none sent lately
    assert limits_to(driver, 1) == []  # its own use is its own business
    driver.mem(2, 1 * GIB)
    assert limits_to(driver, 1) == [p.Limits(8 * GIB, 1 * GIB)]
    driver.advance(BUDGET_REPORT_S)
    driver.disconnect(2)
    assert limits_to(driver, 1) == [p.Limits(8 * GIB, 0)]


def test_the_others_use_is_sent_at_most_every_report_interval_and_the_last_one_is_never_lost():
    driver = Driver()
    identity = node(memory_gib=8)
    driver.register(1, node=identity)
    driver.register(2, node=identity)
    driver.take_sent()
    driver.advance(BUDGET_REPORT_S)
    driver.mem(1, 1 * GIB)
    assert limits_to(driver, 2) == [p.Limits(8 * GIB, 1 * GIB)]
    for gib in (2, 3, 4):  # a burst of allocations
        driver.advance(BUDGET_REPORT_S / 10)
        driver.mem(1, gib * GIB)
    assert limits_to(driver, 2) == []
    deadline = driver.policy.next_deadline()
    assert deadline == pytest.approx(driver.now - 3 * BUDGET_REPORT_S / 10 + BUDGET_REPORT_S)
    driver.advance_to_deadline()
    assert limits_to(driver, 2) == [p.Limits(8 * GIB, 4 * GIB)]
    assert driver.policy.next_deadline() is None


def test_a_container_weight_is_split_among_its_programs_that_want_the_gpu():
    driver = Driver()
    identity = node(compute=30)
    driver.register(1, node=identity)
    driver.register(2, node=identity)
    assert [driver.policy.clients[c].terms.weight for c in (1, 2)] == [3.0, 3.0]
    assert driver.policy.clients[1].terms.source("weight") == KUBELET_SOURCE
    driver.request(1)
    assert driver.policy.budget_rules.share_weight(1, 0) == 3.0  # its sibling does not want the GPU
    driver.request(2)
    assert [driver.policy.budget_rules.share_weight(c, 0) for c in (1, 2)] == [1.5, 1.5]
    driver.disconnect(2)
    assert driver.policy.budget_rules.share_weight(1, 0) == 3.0
    assert not any(isinstance(m, p.Limits) for _, m in driver.take_sent())  # no memory units


@pytest.mark.parametrize("siblings, busy", [(1, 1), (2, 1), (2, 2), (3, 2)])
def test_a_container_gets_its_share_however_many_of_its_programs_run(siblings, busy):
    """Two containers of 30 compute units, busy for an hour: one with `siblings` programs of
    which `busy` always want the GPU (the others ran once and idle), the other with one. Each
    container holds the GPU half of the time (a split among all programs gave the first a third
    with one of two idle)."""
    simulation = Simulation(Driver(tq=30))
    first = [Program(cid) if cid <= busy else Program(cid, burst=0.01, sleep=1e9)
             for cid in range(1, siblings + 1)]
    for program in first:
        simulation.add(program, node=node(compute=30, gpus=None))
    other = Program(10)
    simulation.add(other, node=node(compute=30, container_id="b" * 64, pod="serve-0"))
    simulation.run(60 * 60)
    held = sum(program.held for program in first)
    assert held / (held + other.held) == pytest.approx(0.5, rel=0.05)


def test_the_compute_cap_setting_adds_a_gpu_limit_or_an_sm_share():
    limited = Driver(compute_cap=CAP_GPU_LIMIT)
    limited.register(1, node=node(compute=40))
    terms = limited.policy.clients[1].terms
    assert (terms.weight, terms.gpu_limit, terms.sm_share) == (4.0, 0.4, None)
    shared = Driver(compute_cap=CAP_SM_SHARE)
    shared.register(1, node=node(compute=40))
    terms = shared.policy.clients[1].terms
    assert (terms.weight, terms.gpu_limit, terms.sm_share) == (4.0, None, 40)


def test_memory_and_compute_together():
    driver = Driver()
    driver.register(1, node=node(memory_gib=8, compute=30))
    terms = driver.policy.clients[1].terms
    assert (terms.memory_limit, terms.weight) == (8 * GIB, 3.0)


def test_the_node_names_the_pod_and_a_program_that_says_otherwise_is_logged_once():
    driver = Driver()
    driver.register(1, node=node(pod="train-0"), pod=("prod", "inference-7"))
    who = driver.policy.clients[1].registration
    assert (who.namespace, who.pod, who.container) == ("ml", "train-0", "main")
    warnings = [log.text for log in driver.logs if log.warning]
    assert len(warnings) == 1
    assert "it says it is pod prod/inference-7, but the node says ml/train-0" in warnings[0]
    assert driver.policy.clients[1].identity.pod == "train-0"  # rules match the node's pod


def test_the_rules_match_the_node_pod_not_the_one_the_program_names():
    def rules(identity):
        return ruled(memory_limit=GIB) if identity.pod == "inference-7" else Terms()
    driver = Driver(rules=rules)
    driver.register(1, node=node(pod="train-0"), pod=("ml", "inference-7"))
    assert driver.policy.clients[1].terms.memory_limit is None
    driver.register(2, pod=("ml", "inference-7"))  # outside Kubernetes its word serves
    assert driver.policy.clients[2].terms.memory_limit == GIB


def test_a_rule_matches_the_container_the_node_names_which_no_program_can_claim():
    config = parse('[[rule]]\nmatch = { container = "worker*" }\nmemory_limit = "2GiB"\n',
                   "/etc/gemshare/gemshare.toml", Names(user_exists=lambda name: True,
                                                        group_exists=lambda name: True))
    driver = Driver(rules=config.terms)
    driver.register(1, node=node(container="worker-0", memory_gib=0, gpus=()))
    driver.register(2, node=node(container="sidecar", container_id="b" * 64, gpus=()))
    # Outside Kubernetes, or where the node does not know it, a program has no container: its
    # environment, label or pod name never stands in for one.
    driver.register(3, name="worker-0", label="worker-0", pod=("ml", "worker-0"))
    limits = [driver.policy.clients[cid].terms.memory_limit for cid in (1, 2, 3)]
    assert limits == [2 * GIB, None, None]


def test_a_program_with_no_node_identity_is_as_before():
    driver = Driver()
    driver.register(1)
    who = driver.policy.clients[1]
    assert (who.registration.pod, who.registration.container, who.node) == ("pod", "", None)
    assert driver.take_sent(1) == [p.Registered(1, p.Mode.ON, 30)]


def test_a_container_without_units_has_its_identity_and_no_budget():
    driver = Driver()
    driver.register(1, node=node(gpus=()))
    driver.register(2, node=node(gpus=()))
    assert [driver.policy.clients[c].terms for c in (1, 2)] == [Terms(), Terms()]
    assert driver.take_sent(1) == [p.Registered(1, p.Mode.ON, 30)]


def test_a_stricter_rule_limits_one_program_within_the_shared_budget():
    driver = Driver(rules=lambda identity: ruled(memory_limit=4 * GIB))
    identity = node(memory_gib=8)
    driver.register(1, node=identity)
    driver.register(2, node=identity)
    driver.take_sent()
    driver.mem(1, 3 * GIB)
    driver.advance(BUDGET_REPORT_S)
    assert limits_to(driver, 2) == []  # 4 GiB of its own still fit in the 5 left
    driver.mem(1, 6 * GIB)  # past its own rule: allocated before the rule came, say
    assert limits_to(driver, 2) == [p.Limits(4 * GIB, 2 * GIB)]  # 2 GiB left in the budget


def test_a_container_past_its_budget_is_logged_once_until_it_is_back_within():
    driver = Driver()
    identity = node(memory_gib=8)
    driver.register(1, node=identity)
    driver.register(2, node=identity)
    driver.mem(1, 5 * GIB)
    driver.mem(2, 4 * GIB)  # both allocated before hearing of the other
    driver.mem(2, 4 * GIB + 1)
    over = [log.text for log in driver.logs if log.warning and "budget" in log.text]
    assert len(over) == 1 and "ml/train-0/main" in over[0] and "9216 MiB" in over[0]
    driver.mem(2, 2 * GIB)
    driver.mem(2, 4 * GIB)
    assert len([log for log in driver.logs if log.warning and "budget" in log.text]) == 2


def test_containers_do_not_share_with_each_other():
    driver = Driver()
    driver.register(1, node=node(memory_gib=8, container_id="a" * 64))
    driver.register(2, node=node(memory_gib=8, container_id="b" * 64, pod="other"))
    driver.take_sent()
    driver.advance(BUDGET_REPORT_S)
    driver.mem(1, 3 * GIB)
    driver.advance(BUDGET_REPORT_S)
    assert limits_to(driver, 2) == []


def test_units_on_several_gpus_apply_on_the_gpu_the_program_says_it_uses():
    gpus = (GpuUnits(GPU, 8, 8 * GIB, 0), GpuUnits(OTHER_GPU, 2, 2 * GIB, 0))
    driver = Driver(nvml_uuids={GPU: 0, OTHER_GPU: 1})
    driver.register(1, node=node(gpus=gpus), device=0)
    assert driver.policy.clients[1].terms.memory_limit == 8 * GIB  # GPU 0 is GPU's, by NVML
    driver.register(2, node=node(gpus=gpus), device=0)  # its device 0, but which GPU?
    driver.take_sent()
    driver.uuid(2, OTHER_GPU)
    assert driver.policy.clients[2].terms.memory_limit == 2 * GIB
    assert limits_to(driver, 2) == [p.Limits(2 * GIB, 0)]  # a new limit goes at once
    driver.mem(1, GIB)
    driver.advance(BUDGET_REPORT_S)
    assert limits_to(driver, 2) == []  # not its budget


# ----- REG_VIEW_ONLY ---------------------------------------------------------------------------

def test_a_view_only_program_gets_limits_and_registered_and_is_shown_nowhere():
    driver = Driver()
    identity = node(memory_gib=8, compute=30)
    driver.register(1, node=identity)
    driver.mem(1, 3 * GIB)
    driver.register(2, node=identity, flags=p.REG_VIEW_ONLY)
    driver.register(3, node=identity, flags=p.REG_VIEW_ONLY)
    assert driver.take_sent(2) == [p.Limits(8 * GIB, 3 * GIB), p.Registered(2, p.Mode.ON, 30)]
    assert 2 not in driver.policy.clients and 3 not in driver.policy.clients
    assert [c.registration.id for c in driver.policy.snapshot(driver.now).clients] == [1]
    assert driver.policy.clients[1].terms.weight == 3.0  # it takes no share of the weight
    driver.request(2)
    assert driver.holders() == [] and driver.waiters() == []
    driver.advance(BUDGET_REPORT_S)
    driver.mem(1, 5 * GIB)
    assert limits_to(driver, 2) == [p.Limits(8 * GIB, 5 * GIB)]
    driver.disconnect(2)
    assert not [log for log in driver.logs if "disconnect" in log.text and "client 2" in log.text]


def test_view_only_programs_leave_the_client_limit_to_programs():
    # The shell caps view-only registrations on their own (fair_slots.py); the programs' limit
    # counts programs alone.
    driver = Driver(max_clients=2)
    for cid in (1, 3, 5):
        driver.register(cid, flags=p.REG_VIEW_ONLY)
    driver.register(2)
    driver.register(4)
    assert driver.closed == []
    driver.register(6)
    assert [close.client for close in driver.closed] == [6]
    assert sorted(driver.policy.clients) == [2, 4] and sorted(driver.policy.viewers) == [1, 3, 5]


def test_a_view_only_program_outside_a_container_gets_its_rule_limit():
    driver = Driver(rules=lambda identity: ruled(memory_limit=2 * GIB))
    driver.register(1, flags=p.REG_VIEW_ONLY)
    assert driver.take_sent(1) == [p.Limits(2 * GIB, 0), p.Registered(1, p.Mode.ON, 30)]
