"""The decision pipeline (nvs/core/pipeline.py): its stages' precedence decides who holds the
GPU, and every decision names the stage that made it, in the log and in status."""

import re
from pathlib import Path

import pytest
from policy_driver import Driver

from gemshare_nvs import protocol as p
from gemshare_nvs.core.pipeline import STAGES, Pipeline, Stage
from gemshare_nvs.observe.status import build_status

TQ = 5
DOCS = Path(__file__).resolve().parents[2] / "docs" / "scheduling.md"


def swapped(first: str, second: str) -> tuple[type[Stage], ...]:
    """STAGES with the stages named `first` and `second` in each other's place."""
    names = [stage.name for stage in STAGES]
    i, j = names.index(first), names.index(second)
    stages = list(STAGES)
    stages[i], stages[j] = stages[j], stages[i]
    return tuple(stages)


def copying(stages: tuple[type[Stage], ...]) -> Driver:
    """Client 1 holds device 0 and waits for device 1 keeping it (a copy between the two);
    client 2 holds device 1; client 3 waits for device 0. Then a quantum passes, and every
    holder asked to drop lets go."""
    driver = Driver(tq=TQ, min_slice_ms=TQ * 1000, stages=stages)
    for cid in (1, 2, 3):
        driver.register(cid)
    driver.request(1, device=0)
    driver.request(2, device=1)
    driver.request(1, device=1, keeping=True)
    driver.request(3, device=0)
    driver.advance(TQ)
    for cid, message in driver.take_sent():
        if isinstance(message, p.DropLock):
            driver.release(cid, device=message.device)
    return driver


def test_a_copy_keeps_its_lower_device_only_while_copies_outranks_the_quantum():
    """In precedence order, the copy keeps device 0 past its quantum and gets device 1 once its
    holder lets go; with the two stages swapped, the quantum's end takes device 0 from it and
    gives it to the waiter, and the copy has to start over."""
    kept = copying(STAGES)
    assert (kept.holders(0), kept.holders(1)) == ([1], [1])
    assert kept.waiters(0) == [3]
    lost = copying(swapped("copies", "quantum"))
    assert (lost.holders(0), lost.holders(1)) == ([3], [1])


def forming(stages: tuple[type[Stage], ...]) -> Driver:
    """Client 1, with a gpu_limit it is far from, is one process of a job of two whose other
    process has not joined yet; it asks for the free GPU."""
    driver = Driver(tq=TQ, stages=stages)
    driver.register(1)
    driver.policy.override(4001, {"gpu_limit": 0.5}, driver.now)
    driver.policy.gang(1, p.Gang(2, 2, 0, 0, "job"), driver.now)
    driver.request(1)
    return driver


def test_a_forming_gang_holds_its_member_back_only_while_gangs_outranks_limits():
    """Asked first, the gangs stage keeps the member waiting for its gang; with limits asked
    first, its limit (far off) lets it run alone before the job is complete."""
    held = forming(STAGES)
    assert (held.holders(), held.waiters()) == ([], [1])
    assert decisions(held)["clients"]["1"] == {"stage": "gangs",
                                               "decision": "waits: for its gang job to form"}
    early = forming(swapped("gangs", "limits"))
    assert (early.holders(), early.waiters()) == ([1], [])


def status(driver: Driver) -> dict:
    return build_status(driver.policy, driver.now, 0.0, grace_ms=10_000)


def decisions(driver: Driver) -> dict:
    return status(driver)["devices"][0]["decisions"]


def test_a_waiter_under_its_share_is_granted_by_the_share_stage_and_says_so():
    driver = Driver(tq=30, min_slice_ms=300)
    for cid in (1, 2):
        driver.register(cid)
    driver.request(1)
    driver.advance(20)  # client 1 is busy; client 2 has had nothing
    driver.request(2)
    drop = next(log.text for log in driver.logs if log.text.startswith("drop client 1"))
    assert drop.endswith("; dropped: slice over for a waiter under its share [shares]"), drop
    assert decisions(driver)["clients"]["1"] == {
        "stage": "shares", "decision": "dropped: slice over for a waiter under its share"}
    driver.release(1)
    grant = next(log.text for log in driver.logs if log.text.startswith("grant client 2"))
    assert grant.endswith("; granted: under its share [shares]"), grant
    seen = decisions(driver)
    assert seen["clients"] == {"2": {"stage": "shares", "decision": "granted: under its share"}}
    assert seen["last_drop"] == {"stage": "shares",
                                 "decision": "dropped: slice over for a waiter under its share"}


def test_a_quantum_over_says_so_and_the_waiter_says_what_it_waits_for():
    driver = Driver(tq=TQ)
    for cid in (1, 2):
        driver.register(cid)
    driver.request(1)
    driver.request(2)
    request = next(log.text for log in driver.logs if log.text.startswith("request client 2"))
    assert request.endswith("; waits: its turn in line [quantum]"), request
    assert decisions(driver)["clients"] == {
        "1": {"stage": "quantum", "decision": "granted: device free"},
        "2": {"stage": "quantum", "decision": "waits: its turn in line"}}
    driver.advance(TQ)
    assert decisions(driver)["clients"]["1"] == {"stage": "quantum",
                                                 "decision": "dropped: quantum over"}
    driver.release(1)
    assert decisions(driver)["clients"]["2"] == {"stage": "quantum",
                                                 "decision": "granted: first in line"}


def test_a_paused_waiter_names_its_gpu_limit():
    driver = Driver(tq=TQ)
    driver.register(1)
    driver.policy.override(4001, {"gpu_limit": 0.1}, driver.now)
    driver.request(1)
    driver.advance(10)  # it reaches its limit, and is dropped whoever waits
    driver.release(1)
    driver.request(1)
    assert driver.waiters() == [1]
    assert decisions(driver)["clients"]["1"] == {"stage": "limits",
                                                 "decision": "waits: paused by its gpu limit"}


def test_a_pipeline_needs_a_name_for_each_stage():
    with pytest.raises(ValueError, match="a name of its own"):
        Pipeline(None, (*STAGES, STAGES[0]))


def test_the_docs_list_the_stages_in_precedence_order():
    """docs/scheduling.md's table of stages, first column, top to bottom."""
    table = DOCS.read_text().split("## The decision pipeline", 1)[1]
    named = re.findall(r"^\| `(\w+)` \|", table, re.MULTILINE)
    assert named == [stage.name for stage in STAGES]
