"""The Prometheus metrics as the collector reads them from the policy core at a scrape, on a
fake clock: names and labels as dashboards use them, running holds counted, and no series left
behind by clients that have gone."""

from __future__ import annotations

import pytest
from policy_driver import Driver
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gemshare_nvs import protocol as p
from gemshare_nvs.observe.metrics import END_REASONS, registry_for
from gemshare_nvs.version import version

M = 1 << 20
# Every family the scheduler exports, as Prometheus' text format names it (counters by their
# name without _total: the samples carry it).
FAMILIES = {"gemshare_lock_held_seconds": "counter", "gemshare_grants": "counter",
            "gemshare_drops": "counter", "gemshare_revocations": "counter",
            "gemshare_lock_wait_seconds": "histogram", "gemshare_queue_length": "gauge",
            "gemshare_holders": "gauge", "gemshare_allocated_bytes": "gauge",
            "gemshare_evictions": "counter", "gemshare_moved_bytes": "counter",
            "gemshare_clients_connected": "gauge", "gemshare_gangs": "gauge",
            "gemshare_build_info": "gauge"}


def scrape(driver: Driver) -> dict:
    """sample name -> {frozenset of label items: value}."""
    text = generate_latest(registry_for(driver.policy, lambda: driver.now)).decode()
    samples: dict = {}
    for family in text_string_to_metric_families(text):
        assert FAMILIES[family.name] == family.type, family.name
        for sample in family.samples:
            samples.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return samples


def value(samples: dict, name: str, **labels) -> float:
    return samples[name][frozenset((k, str(v)) for k, v in labels.items())]


def client_labels(driver: Driver, cid: int, device: int = 0) -> dict:
    who = driver.policy.clients[cid].registration
    return {"device": device, "client": cid, "pid": who.pid, "process": who.name,
            "pod": who.pod, "namespace": who.namespace}


def two_clients() -> Driver:
    """1 holds device 0 since t=100 with 48 MiB allocated, 2 waits since t=101."""
    driver = Driver(tq=10, min_slice_ms=3_600_000)
    for cid in (1, 2):
        driver.register(cid, name=f"prog{cid}")
    driver.mem(1, 48 * M)
    driver.request(1)
    driver.advance(1.0)
    driver.request(2)
    return driver


def test_every_family_is_exported_with_its_type():
    driver = two_clients()
    text = generate_latest(registry_for(driver.policy, lambda: driver.now)).decode()
    assert {family.name for family in text_string_to_metric_families(text)} == set(FAMILIES)
    samples = scrape(driver)
    assert value(samples, "gemshare_build_info", version=version()) == 1
    assert value(samples, "gemshare_clients_connected") == 2
    for state in ("forming", "complete", "broken"):
        assert value(samples, "gemshare_gangs", state=state) == 0


def test_the_lock_as_it_stands_and_a_running_hold():
    driver = two_clients()
    driver.advance(2.0)
    samples = scrape(driver)
    assert value(samples, "gemshare_holders", device=0) == 1
    assert value(samples, "gemshare_queue_length", device=0) == 1
    assert value(samples, "gemshare_grants_total", device=0) == 1
    assert value(samples, "gemshare_lock_held_seconds_total",
                 **client_labels(driver, 1)) == pytest.approx(3.0)
    assert value(samples, "gemshare_allocated_bytes", **client_labels(driver, 1)) == 48 * M
    # 2 has neither held nor allocated anything: no series of its own yet.
    assert all(("client", "2") not in labels
               for labels in samples.get("gemshare_lock_held_seconds_total", {}))
    assert all(("client", "2") not in labels for labels in samples["gemshare_allocated_bytes"])
    for reason in END_REASONS:
        assert value(samples, "gemshare_drops_total", device=0, reason=reason) == 0
    # No wait has ended yet: every bucket is there, empty, as on any device.
    buckets = samples["gemshare_lock_wait_seconds_bucket"]
    assert len(buckets) == 18 and set(buckets.values()) == {0}
    assert value(samples, "gemshare_lock_wait_seconds_count", device=0) == 0


def test_after_a_turn_the_counts_and_the_wait_histogram():
    driver = two_clients()
    driver.advance_to_deadline()  # 1's quantum is over at t=110
    driver.advance(0.5)
    driver.release(1)  # 2 is granted after waiting 9.5 s
    driver.advance(1.0)
    samples = scrape(driver)
    assert value(samples, "gemshare_grants_total", device=0) == 2
    assert value(samples, "gemshare_drops_total", device=0, reason="quantum") == 1
    assert value(samples, "gemshare_revocations_total", device=0) == 0
    assert value(samples, "gemshare_lock_wait_seconds_count", device=0) == 1
    assert value(samples, "gemshare_lock_wait_seconds_sum", device=0) == pytest.approx(9.5)
    assert value(samples, "gemshare_lock_wait_seconds_bucket", device=0, le="5.0") == 0
    assert value(samples, "gemshare_lock_wait_seconds_bucket", device=0, le="10.0") == 1
    assert value(samples, "gemshare_lock_wait_seconds_bucket", device=0, le="+Inf") == 1
    assert value(samples, "gemshare_lock_held_seconds_total",
                 **client_labels(driver, 1)) == pytest.approx(10.5)
    assert value(samples, "gemshare_lock_held_seconds_total",
                 **client_labels(driver, 2)) == pytest.approx(1.0)


def test_a_client_that_leaves_takes_its_series_and_the_device_keeps_its_counts():
    driver = two_clients()
    driver.advance(1.0)
    driver.disconnect(1)
    driver.advance(1.0)
    samples = scrape(driver)
    for name in ("gemshare_lock_held_seconds_total", "gemshare_allocated_bytes"):
        assert all(("client", "1") not in labels for labels in samples.get(name, {})), name
    assert value(samples, "gemshare_drops_total", device=0, reason="disconnected") == 1
    assert value(samples, "gemshare_grants_total", device=0) == 2
    assert value(samples, "gemshare_clients_connected") == 1
    driver.disconnect(2)
    samples = scrape(driver)
    assert "gemshare_lock_held_seconds_total" not in samples
    assert "gemshare_allocated_bytes" not in samples
    assert value(samples, "gemshare_holders", device=0) == 0


def test_mode_off_ends_the_holds_and_the_queue():
    driver = two_clients()
    driver.configure(mode=p.Mode.OFF)
    samples = scrape(driver)
    assert value(samples, "gemshare_drops_total", device=0, reason="mode") == 1
    assert value(samples, "gemshare_holders", device=0) == 0
    assert value(samples, "gemshare_queue_length", device=0) == 0
