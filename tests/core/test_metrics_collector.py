"""The Prometheus metrics as the collector reads them from the policy core at a scrape, on a
fake clock: names and labels as dashboards use them, running holds counted, and no series left
behind by clients that have gone."""

from __future__ import annotations

import pytest
from policy_driver import Driver
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gemshare_nvs import protocol as p
from gemshare_nvs.core.model.container import GpuUnits, NodeIdentity
from gemshare_nvs.observe.metrics import (
    END_REASONS,
    FIXED_SERIES,
    PER_BUDGET_SERIES,
    PER_CLIENT_FAMILIES,
    PER_DEVICE_SERIES,
    registry_for,
)
from gemshare_nvs.core.rules.checks.claims import GpuProcess
from gemshare_nvs.version import version

M = 1 << 20
# Every family the scheduler exports, as Prometheus' text format names it (counters by their
# name without _total: the samples carry it).
FAMILIES = {"gemshare_lock_held_seconds": "counter", "gemshare_grants": "counter",
            "gemshare_drops": "counter", "gemshare_revocations": "counter",
            "gemshare_lock_wait_seconds": "histogram", "gemshare_queue_length": "gauge",
            "gemshare_holders": "gauge", "gemshare_allocated_bytes": "gauge",
            "gemshare_evictions": "counter", "gemshare_moved_bytes": "counter",
            "gemshare_clients_connected": "gauge", "gemshare_view_only_connected": "gauge",
            "gemshare_gangs": "gauge",
            "gemshare_build_info": "gauge", "gemshare_memory_budget_bytes": "gauge",
            "gemshare_memory_reports_refused": "counter",
            "gemshare_unregistered_gpu_processes": "gauge",
            "gemshare_unregistered_gpu_processes_seen": "counter"}


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


def device_labels(device: int = 0, uuid: str = "") -> dict:
    return {"device": device, "device_uuid": uuid}


def client_labels(driver: Driver, cid: int, device: int = 0, uuid: str = "") -> dict:
    who = driver.policy.clients[cid]
    return {**device_labels(device, uuid), "namespace": who.registration.namespace,
            "pod": who.registration.pod, "process": who.registration.name,
            "label": who.identity.label, "container": who.registration.container}


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
    assert value(samples, "gemshare_holders", **device_labels()) == 1
    assert value(samples, "gemshare_queue_length", **device_labels()) == 1
    assert value(samples, "gemshare_grants_total", **device_labels()) == 1
    assert value(samples, "gemshare_lock_held_seconds_total",
                 **client_labels(driver, 1)) == pytest.approx(3.0)
    assert value(samples, "gemshare_allocated_bytes", **client_labels(driver, 1)) == 48 * M
    # 2 has neither held nor allocated anything: no series of its own yet.
    assert list(samples["gemshare_lock_held_seconds_total"]) == [
        frozenset((k, str(v)) for k, v in client_labels(driver, 1).items())]
    assert len(samples["gemshare_allocated_bytes"]) == 1
    for reason in END_REASONS:
        assert value(samples, "gemshare_drops_total", **device_labels(), reason=reason) == 0
    # No wait has ended yet: every bucket is there, empty, as on any device.
    buckets = samples["gemshare_lock_wait_seconds_bucket"]
    assert len(buckets) == 18 and set(buckets.values()) == {0}
    assert value(samples, "gemshare_lock_wait_seconds_count", **device_labels()) == 0


def test_after_a_turn_the_counts_and_the_wait_histogram():
    driver = two_clients()
    driver.advance_to_deadline()  # 1's quantum is over at t=110
    driver.advance(0.5)
    driver.release(1)  # 2 is granted after waiting 9.5 s
    driver.advance(1.0)
    samples = scrape(driver)
    here = device_labels()
    assert value(samples, "gemshare_grants_total", **here) == 2
    assert value(samples, "gemshare_drops_total", **here, reason="quantum") == 1
    assert value(samples, "gemshare_revocations_total", **here) == 0
    assert value(samples, "gemshare_lock_wait_seconds_count", **here) == 1
    assert value(samples, "gemshare_lock_wait_seconds_sum", **here) == pytest.approx(9.5)
    assert value(samples, "gemshare_lock_wait_seconds_bucket", **here, le="5.0") == 0
    assert value(samples, "gemshare_lock_wait_seconds_bucket", **here, le="10.0") == 1
    assert value(samples, "gemshare_lock_wait_seconds_bucket", **here, le="+Inf") == 1
    assert value(samples, "gemshare_lock_held_seconds_total",
                 **client_labels(driver, 1)) == pytest.approx(10.5)
    assert value(samples, "gemshare_lock_held_seconds_total",
                 **client_labels(driver, 2)) == pytest.approx(1.0)


def test_a_client_that_leaves_takes_its_series_and_the_device_keeps_its_counts():
    driver = two_clients()
    driver.advance(1.0)
    gone = client_labels(driver, 1)
    driver.disconnect(1)
    driver.advance(1.0)
    samples = scrape(driver)
    for name in ("gemshare_lock_held_seconds_total", "gemshare_allocated_bytes"):
        assert all(("process", "prog1") not in labels for labels in samples.get(name, {})), name
    assert frozenset((k, str(v)) for k, v in gone.items()) not in \
        samples["gemshare_lock_held_seconds_total"]
    assert value(samples, "gemshare_drops_total", **device_labels(), reason="disconnected") == 1
    assert value(samples, "gemshare_grants_total", **device_labels()) == 2
    assert value(samples, "gemshare_clients_connected") == 1
    driver.disconnect(2)
    samples = scrape(driver)
    assert "gemshare_lock_held_seconds_total" not in samples
    assert "gemshare_allocated_bytes" not in samples
    assert value(samples, "gemshare_holders", **device_labels()) == 0


def test_mode_off_ends_the_holds_and_the_queue():
    driver = two_clients()
    driver.configure(mode=p.Mode.OFF)
    samples = scrape(driver)
    assert value(samples, "gemshare_drops_total", **device_labels(), reason="mode") == 1
    assert value(samples, "gemshare_holders", **device_labels()) == 0
    assert value(samples, "gemshare_queue_length", **device_labels()) == 0


def test_no_series_names_a_pid_or_a_connection():
    driver = two_clients()
    driver.advance(1.0)
    for samples in scrape(driver).values():
        for labels in samples:
            assert not {name for name, _ in labels} & {"pid", "client", "id"}, labels


def test_clients_of_one_identity_share_a_series_and_add_up():
    driver = Driver(tq=10, min_slice_ms=3_600_000)
    for cid in (1, 2):  # two processes of one pod, both python, both labelled "train"
        driver.register(cid, name="python", label="train")
        driver.mem(cid, 10 * M)
    driver.request(1)
    driver.advance(4.0)
    driver.release(1)
    driver.request(2)
    driver.advance(1.5)
    samples = scrape(driver)
    labels = client_labels(driver, 1)
    assert labels == client_labels(driver, 2)
    assert value(samples, "gemshare_lock_held_seconds_total", **labels) == pytest.approx(5.5)
    assert value(samples, "gemshare_allocated_bytes", **labels) == 20 * M
    assert len(samples["gemshare_lock_held_seconds_total"]) == 1
    # One leaves: the series goes on from where it was (a counter never goes back)...
    driver.disconnect(1)
    driver.advance(0.5)
    samples = scrape(driver)
    assert value(samples, "gemshare_lock_held_seconds_total", **labels) == pytest.approx(6.0)
    assert value(samples, "gemshare_allocated_bytes", **labels) == 10 * M
    # ...and a restarted program of the same identity adds to it.
    driver.register(3, name="python", label="train")
    driver.release(2)
    driver.request(3)
    driver.advance(1.0)
    samples = scrape(driver)
    assert value(samples, "gemshare_lock_held_seconds_total", **labels) == pytest.approx(7.0)


def test_many_short_programs_of_one_identity_leave_the_series_count_alone():
    driver = Driver(tq=10, min_slice_ms=3_600_000)
    driver.register(1, name="notebook")
    driver.mem(1, M)
    counts = set()
    for cid in range(2, 52):  # fifty short runs of one program, each a new pid and connection
        driver.register(cid, name="python", label="eval")
        driver.mem(cid, M)
        driver.request(cid)
        driver.advance(0.1)
        driver.disconnect(cid)
        counts.add(sum(len(samples) for samples in scrape(driver).values()))
    assert len(counts) == 1


def test_the_series_count_reaches_the_documented_bound_and_no_further():
    driver = Driver(tq=10, min_slice_ms=3_600_000)
    identities = [("python", "a"), ("python", "b"), ("torchrun", "a")]
    clients = []
    for cid, (name, label) in enumerate(identities * 3, start=1):  # each identity thrice
        for device in (0, 1):
            driver.register(cid * 10 + device, name=name, label=label, device=device)
            driver.mem(cid * 10 + device, M, device=device)
            clients.append((cid * 10 + device, device))
    for cid, device in clients:  # every client holds once, one after the other
        driver.request(cid, device=device)
        driver.advance(0.1)
        driver.release(cid, device=device)
    samples = scrape(driver)
    total = sum(len(found) for found in samples.values())
    gpus = 2
    assert total == FIXED_SERIES + gpus * (PER_DEVICE_SERIES +
                                           PER_CLIENT_FAMILIES * len(identities))


def test_a_drop_that_moves_memory_to_the_host_counts_as_an_eviction():
    driver = Driver(tq=10, limit=24 << 30, min_slice_ms=3_600_000)
    for cid in (1, 2):
        driver.register(cid)
        driver.mem(cid, 16 << 30, total=80 << 30)
    driver.request(1)
    driver.request(2)  # its memory does not fit beside 1's: 1 must move some out as it goes
    driver.take_sent()
    driver.advance_to_deadline()  # the quantum is over: 1 is dropped
    (drop,) = [m for cid, m in driver.take_sent() if isinstance(m, p.DropLock)]
    assert drop.evict_bytes > 0
    samples = scrape(driver)
    assert value(samples, "gemshare_evictions_total", **device_labels()) == 1


def test_a_drop_that_moves_nothing_is_no_eviction():
    driver = two_clients()  # no capacity known: nothing is ever asked to move
    driver.advance_to_deadline()
    (drop,) = [m for cid, m in driver.take_sent() if isinstance(m, p.DropLock)]
    assert drop.evict_bytes == 0
    assert value(scrape(driver), "gemshare_evictions_total", **device_labels()) == 0


def test_device_series_carry_the_gpus_uuid_once_it_is_known():
    uuid = "GPU-0a1b2c3d-0000-1111-2222-333344445555"
    driver = Driver(tq=10, nvml_uuids={uuid: 0})
    driver.register(1, name="prog")
    driver.mem(1, 8 * M)
    driver.request(1)
    driver.advance(1.0)
    samples = scrape(driver)
    assert value(samples, "gemshare_grants_total", **device_labels(0, uuid)) == 1
    assert value(samples, "gemshare_allocated_bytes", **client_labels(driver, 1, 0, uuid)) == 8 * M
    assert {dict(labels)["device_uuid"] for found in samples.values() for labels in found
            if "device" in dict(labels)} == {uuid}


def test_a_container_has_its_memory_budget_and_its_programs_series_by_container():
    driver = Driver(tq=10, min_slice_ms=3_600_000)
    node = NodeIdentity("c" * 64, "train-0", "ml", "worker", "uid-1",
                        (GpuUnits("GPU-1", 8, 8 << 30, 0),))
    for cid in (1, 2):
        driver.register(cid, name="python", node=node)
        driver.mem(cid, cid * M)
    driver.register(3, name="python", pod=("ml", "train-0"))  # says so; the node did not
    driver.mem(3, 4 * M)
    samples = scrape(driver)
    assert value(samples, "gemshare_memory_budget_bytes", **device_labels(), namespace="ml",
                 pod="train-0", container="worker") == 8 << 30
    assert len(samples["gemshare_memory_budget_bytes"]) == PER_BUDGET_SERIES
    memory = {dict(labels)["container"]: count
              for labels, count in samples["gemshare_allocated_bytes"].items()}
    assert memory == {"worker": 3 * M, "": 4 * M}


def test_view_only_registrations_are_counted_apart_from_the_clients():
    driver = two_clients()
    for cid in (3, 4, 5):
        driver.register(cid, name="nvidia-smi", flags=p.REG_VIEW_ONLY)
    samples = scrape(driver)
    assert value(samples, "gemshare_view_only_connected") == 3
    assert value(samples, "gemshare_clients_connected") == 2


def test_refused_reports_and_unregistered_gpu_users_are_counted_per_device():
    driver = Driver(tq=10)
    driver.register(1)
    listed = {0: {4001: GpuProcess(4001, 0), 9999: GpuProcess(9999, 64 * M, "rogue", 1000)}}
    driver._take(driver.policy.gpu_processes(listed, driver.now))
    driver.register(2)
    driver.mem(2, 48 * M)  # a client NVML does not list
    for _ in range(2):
        driver.advance(driver.policy.unregistered.after_s)
        driver._take(driver.policy.gpu_processes(listed, driver.now))
    samples = scrape(driver)
    labels = device_labels()
    assert value(samples, "gemshare_memory_reports_refused_total", reason="not_on_device",
                 **labels) == 1
    assert value(samples, "gemshare_memory_reports_refused_total", reason="below_nvml",
                 **labels) == 0
    assert value(samples, "gemshare_unregistered_gpu_processes", **labels) == 1
    assert value(samples, "gemshare_unregistered_gpu_processes_seen_total", **labels) == 1
