"""The STATUS object: required keys, per-client accounting, and NVML figures when given."""

import pytest
from policy_driver import Driver

from gemshare_nvs import protocol as p
from gemshare_nvs.observe.status import build_status

CLIENT_KEYS = {"id", "pid", "uid", "name", "device", "pod", "namespace", "state", "hold_time_s",
               "waits", "wait_time_s", "allocated_bytes", "connected_since", "revocations"}


def status_of(driver: Driver, gpus=None) -> dict:
    return build_status(driver.policy, driver.now, 1_800_000_000.0, grace_ms=2500, gpus=gpus)


def by_id(status: dict) -> dict:
    return {client["id"]: client for client in status["clients"]}


def test_status_has_every_required_key():
    driver = Driver(tq=17, grace=2.5)
    driver.register(1)
    status = status_of(driver)
    assert (status["tq"], status["anti_thrash"], status["grace_ms"]) == (17, "on", 2500)
    assert CLIENT_KEYS <= set(status["clients"][0])
    assert status["devices"] == [{"index": 0, "holders": [], "waiters": [], "dropping": [],
                                  "drop_pending": False, "allocated_bytes": 0,
                                  "reported_total_bytes": 0, "capacity_bytes": None,
                                  "capacity_source": None, "context_reserve_bytes": 512 << 20,
                                  "holders_allocated_bytes": 0, "resident_bytes": 0,
                                  "switch_cost_s": 0.0, "loan_cost_s": 0.0, "link_prior_gbps": None,
                                  "loan": None,
                                  "evicting": [], "idle_hints_ms": {},
                                  "slices_s": {}, "turns_s": {}, "last_drop": None,
                                  "decisions": {"clients": {}, "last_drop": None}}]


def test_states_hold_and_wait_times_follow_the_clock():
    driver = Driver(tq=10)
    driver.register(1, wall=1_700_000_001.0)
    driver.register(2, wall=1_700_000_002.0)
    driver.register(3)
    driver.request(1)
    driver.advance(4)
    driver.request(2)
    driver.advance(3)
    clients = by_id(status_of(driver))
    assert [clients[c]["state"] for c in (1, 2, 3)] == ["holding", "waiting", "idle"]
    assert clients[1]["hold_time_s"] == pytest.approx(7)
    assert (clients[2]["waits"], clients[2]["wait_time_s"]) == (1, pytest.approx(3))
    assert clients[2]["connected_since"] == 1_700_000_002.0
    driver.release(1, reason=p.ReleaseReason.IDLE)
    driver.advance(5)
    driver.release(2, reason=p.ReleaseReason.IDLE)
    driver.advance(50)
    clients = by_id(status_of(driver))
    assert clients[1]["hold_time_s"] == pytest.approx(7)
    assert (clients[2]["hold_time_s"], clients[2]["wait_time_s"]) == (pytest.approx(5),
                                                                      pytest.approx(3))
    assert clients[1]["state"] == clients[2]["state"] == "idle"


def test_immediate_grants_are_not_counted_as_waits():
    driver = Driver()
    driver.register(1)
    driver.request(1)
    assert by_id(status_of(driver))[1]["waits"] == 0


def test_devices_list_holders_waiters_in_order_and_drop_pending():
    driver = Driver(tq=1)
    for cid in (1, 2, 3):
        driver.register(cid)
    for cid in (1, 3, 2):
        driver.request(cid)
    driver.advance_to_deadline()
    device, = status_of(driver)["devices"]
    assert (device["holders"], device["waiters"], device["drop_pending"]) == ([1], [3, 2], True)


def test_revocation_is_counted_and_marked():
    driver = Driver(tq=1, grace=1)
    driver.register(1)
    driver.register(2)
    driver.request(1)
    driver.request(2)
    driver.advance_to_deadline()
    driver.advance_to_deadline()
    status = status_of(driver)
    assert (by_id(status)[1]["revocations"], by_id(status)[1]["revoked"]) == (1, True)
    assert status["revocations"] == 1
    driver.request(1)
    driver.release(2, reason=p.ReleaseReason.IDLE)
    assert by_id(status_of(driver))[1]["revoked"] is False


def test_memory_reports_are_summed_per_client_and_device():
    driver = Driver()
    driver.register(1)
    driver.register(2)
    driver.mem(1, 1000, device=0)
    driver.mem(1, 500, device=1)
    driver.mem(1, 2000, device=0)  # a new report replaces the old figure
    driver.mem(2, 7, device=0, total=80 << 30)
    status = status_of(driver)
    assert status["devices"][0]["reported_total_bytes"] == 80 << 30
    assert by_id(status)[1]["allocated_bytes"] == 2500
    assert {d["index"]: d["allocated_bytes"] for d in status["devices"]} == {0: 2007, 1: 500}


def test_nvml_figures_appear_beside_the_lock_state():
    driver = Driver()
    driver.register(1)
    driver.request(1)
    gpus = [{"index": 0, "name": "NVIDIA H100", "memory_total_bytes": 80, "memory_used_bytes": 8},
            {"index": 1, "name": "NVIDIA H100", "memory_total_bytes": 80, "memory_used_bytes": 0}]
    status = status_of(driver, gpus)
    assert status["nvml"] is True
    assert [(d["index"], d["name"], d["holders"]) for d in status["devices"]] == [
        (0, "NVIDIA H100", [1]), (1, "NVIDIA H100", [])]
    assert status_of(driver)["nvml"] is False


def test_terms_given_with_gemsharectl_say_they_last_only_for_the_connection():
    driver = Driver()
    driver.register(1)
    driver.register(2)
    assert by_id(status_of(driver))[1]["overrides"] is None
    driver.policy.override(4001, {"weight": 2, "gpu_limit": None}, driver.now)
    clients = by_id(status_of(driver))
    assert clients[1]["overrides"] == {
        "values": {"weight": 2, "gpu_limit": None},
        "lasts": "until the client disconnects or the scheduler restarts"}
    assert clients[1]["terms_from"]["weight"] == "gemsharectl"
    assert clients[2]["overrides"] is None
    driver.policy.override(4001, {}, driver.now, reset=True)
    assert by_id(status_of(driver))[1]["overrides"] is None
