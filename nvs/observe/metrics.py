"""The scheduler's state as Prometheus metrics, read from the policy core at each scrape.

Nothing is pushed into the metrics as events happen: the collector reads a snapshot of the
policy and its tallies (tallies.py) when Prometheus asks, so the rules never wait on it and
the two can never disagree. The names are a contract: dashboards and alerts use them.

Every series of a device carries `device` (the scheduler's number, as in gemsharectl status)
and `device_uuid` (the GPU's UUID, as NVIDIA's DCGM exporter labels it, so the two join).

Cardinality stays bounded. Series per client are labelled by what people group programs by
(namespace, pod, container, process, label: tallies.Series), never by pid or connection, so
clients alike share one series and a program that comes back adds to it; they exist only while a
client of theirs is connected. A node serves at most FIXED_SERIES (and mps_metrics.MPS_SERIES
with --mps) + PER_DEVICE_SERIES per GPU + PER_CLIENT_FAMILIES per GPU for each distinct client
identity connected (at most --max-clients) + PER_BUDGET_SERIES per GPU for each Kubernetes
container connected with memory units there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from ..core.model.text import HOLD_ENDINGS, REVOKED
from ..core.policy import Policy
from ..core.rules.checks.claims import REFUSALS
from ..core.rules.gangs import BROKEN, COMPLETE, FORMING
from ..core.tallies import TO_DEVICE, TO_HOST, WAIT_BUCKETS, Series, WaitHistogram, series_of
from ..version import version
from .mps_metrics import MpsCollector

# Every way a hold ends, as status names it; each device has a series for each from the start,
# so that rates over them need no series to appear first.
END_REASONS = HOLD_ENDINGS
DEVICE_LABELS = ("device", "device_uuid")
CLIENT_LABELS = (*DEVICE_LABELS, "namespace", "pod", "process", "label", "container")
BUDGET_LABELS = (*DEVICE_LABELS, "namespace", "pod", "container")
DIRECTIONS = (TO_HOST, TO_DEVICE)
GANG_STATES = (FORMING, COMPLETE, BROKEN)
# What the cardinality bound above adds up: the node's own series (clients connected, view-only
# registrations, gangs by state, build info); each GPU's (grants, drops by reason, revocations, the wait histogram's
# buckets, sum and count, queue, holders, evictions, moves by direction, memory reports refused
# by reason, GPU users that are no client now and since the start); and per client
# identity and GPU, its lock time and its memory.
FIXED_SERIES = 1 + 1 + len(GANG_STATES) + 1
PER_DEVICE_SERIES = (1 + len(END_REASONS) + 1 + len(WAIT_BUCKETS) + 1 + 2 + 1 + 1 + 1 +
                     len(DIRECTIONS) + len(REFUSALS) + 1 + 1)
PER_CLIENT_FAMILIES = 2
PER_BUDGET_SERIES = 1  # a container's memory budget


class SchedulerCollector(Collector):
    """Collects `policy`'s metrics at the time `clock()` gives (the policy's own clock)."""

    def __init__(self, policy: Policy, clock: Callable[[], float]):
        self.policy = policy
        self.clock = clock

    def collect(self) -> Iterable:
        policy, now = self.policy, self.clock()
        snapshot = policy.snapshot(now)
        tallies = policy.tallies
        devices = sorted({dev.index for dev in snapshot.devices} | set(policy.grants) |
                         set(tallies.waits) | {device for device, _ in tallies.ended} |
                         set(tallies.evictions) | {device for device, _ in tallies.moved} |
                         set(policy.unregistered.now) | set(tallies.unregistered))
        by_index = {dev.index: dev for dev in snapshot.devices}

        labels = list(DEVICE_LABELS)
        grants = CounterMetricFamily("gemshare_grants", "Locks granted, by device.",
                                     labels=labels)
        drops = CounterMetricFamily("gemshare_drops",
                                    "Holds ended, by device and reason (as status names it).",
                                    labels=[*labels, "reason"])
        revocations = CounterMetricFamily("gemshare_revocations",
                                          "Locks taken back from holders that did not release "
                                          "them in time, by device.", labels=labels)
        waits = HistogramMetricFamily("gemshare_lock_wait_seconds",
                                      "Time from a lock request to its grant, for requests "
                                      "that had to wait, by device.", labels=labels)
        queue = GaugeMetricFamily("gemshare_queue_length", "Clients waiting for the lock.",
                                  labels=labels)
        holders = GaugeMetricFamily("gemshare_holders", "Clients holding the lock.",
                                    labels=labels)
        evictions = CounterMetricFamily("gemshare_evictions",
                                        "Clients asked to move memory off the device to the "
                                        "host, by an eviction or with a drop.", labels=labels)
        moved = CounterMetricFamily("gemshare_moved_bytes",
                                    "Bytes clients reported moving between device and host.",
                                    labels=[*labels, "direction"])
        refused = CounterMetricFamily("gemshare_memory_reports_refused",
                                      "Clients' memory reports that NVML's list of the GPU's "
                                      "processes did not bear out, by device and reason "
                                      "(not_on_device, below_nvml, above_mapped), each client counted once.",
                                      labels=[*labels, "reason"])
        unregistered = GaugeMetricFamily("gemshare_unregistered_gpu_processes",
                                         "Processes NVML lists on the GPU that are no client of "
                                         "the scheduler: they use it unscheduled.", labels=labels)
        unregistered_seen = CounterMetricFamily("gemshare_unregistered_gpu_processes_seen",
                                                "Processes found using the GPU without the "
                                                "scheduler, since it started.", labels=labels)
        for device in devices:
            names = [str(device), policy.gpu_indices.uuid_of(device)]
            grants.add_metric(names, policy.grants.get(device, 0))
            for reason in END_REASONS:
                drops.add_metric([*names, reason], tallies.ended[device, reason])
            revocations.add_metric(names, tallies.ended[device, REVOKED])
            histogram = tallies.waits.get(device) or WaitHistogram()
            waits.add_metric(names, [(_bound(bound), count)
                                     for bound, count in histogram.cumulative()],
                             histogram.total)
            dev = by_index.get(device)
            queue.add_metric(names, len(dev.waiters) if dev else 0)
            holders.add_metric(names, len(dev.holders) if dev else 0)
            evictions.add_metric(names, tallies.evictions[device])
            for direction in DIRECTIONS:
                moved.add_metric([*names, direction], tallies.moved[device, direction])
            for reason in REFUSALS:
                refused.add_metric([*names, reason], tallies.refused_reports[device, reason])
            unregistered.add_metric(names, len(policy.unregistered.now.get(device, ())))
            unregistered_seen.add_metric(names, tallies.unregistered[device])

        held = CounterMetricFamily("gemshare_lock_held_seconds",
                                   "Seconds the clients of one identity (namespace, pod, "
                                   "process, label) have held the lock, running holds "
                                   "included, while any of them is connected.",
                                   labels=list(CLIENT_LABELS))
        allocated = GaugeMetricFamily("gemshare_allocated_bytes",
                                      "Bytes the connected clients of one identity have "
                                      "allocated.", labels=list(CLIENT_LABELS))
        series = {client.registration.id: series_of(client.registration, client.label)
                  for client in snapshot.clients}
        held_seconds: Counter = Counter()  # (series, device) -> seconds
        for who in set(series.values()):
            for device, seconds in tallies.held_by(who).items():
                held_seconds[who, device] += seconds
        for dev in snapshot.devices:
            for cid, seconds in dev.slices.items():  # the holds running now
                held_seconds[series[cid], dev.index] += seconds
        memory: Counter = Counter()
        for client in snapshot.clients:
            for device, count in client.allocated.items():
                memory[series[client.registration.id], device] += count
        for family, values in ((held, held_seconds), (allocated, memory)):
            for (who, device), value in sorted(values.items()):
                family.add_metric(_client_labels(policy, who, device), value)
        budgets = GaugeMetricFamily("gemshare_memory_budget_bytes",
                                    "The memory a Kubernetes container's memory units give "
                                    "its programs together on the device.",
                                    labels=list(BUDGET_LABELS))
        for device, (namespace, pod, container), size in sorted({
                (client.device, (client.registration.namespace, client.registration.pod,
                                 client.registration.container), client.units.memory_bytes)
                for client in snapshot.clients
                if client.units is not None and client.units.memory_bytes}):
            budgets.add_metric([str(device), policy.gpu_indices.uuid_of(device), namespace, pod,
                                container], size)

        gangs = GaugeMetricFamily("gemshare_gangs", "Gangs of a distributed job, by state.",
                                  labels=["state"])
        for state in GANG_STATES:
            gangs.add_metric([state], sum(1 for gang in snapshot.gangs if gang.state == state))
        connected = GaugeMetricFamily("gemshare_clients_connected", "Registered clients.",
                                      value=len(snapshot.clients))
        viewers = GaugeMetricFamily("gemshare_view_only_connected",
                                    "View-only registrations (REG_VIEW_ONLY: nvidia-smi, NVML), "
                                    "which hold slots of their own.", value=len(policy.viewers))
        build = GaugeMetricFamily("gemshare_build_info", "The scheduler's version.",
                                  labels=["version"])
        build.add_metric([version()], 1)
        yield from (held, grants, drops, revocations, waits, queue, holders, allocated,
                    budgets, evictions, moved, refused, unregistered, unregistered_seen,
                    connected, viewers, gangs, build)


def _client_labels(policy: Policy, who: Series, device: int) -> list[str]:
    return [str(device), policy.gpu_indices.uuid_of(device), who.namespace, who.pod,
            who.process, who.label, who.container]


def _bound(seconds: float) -> str:
    return "+Inf" if seconds == float("inf") else repr(seconds)


def registry_for(policy: Policy, clock: Callable[[], float],
                 mps_status: Callable[[], dict] | None = None) -> CollectorRegistry:
    """A registry of the scheduler's metrics alone (no process or platform collectors: the
    node exporter reports those); `mps_status` gives the MPS control daemon's, when it runs."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SchedulerCollector(policy, clock))
    if mps_status is not None:
        registry.register(MpsCollector(mps_status))
    return registry
