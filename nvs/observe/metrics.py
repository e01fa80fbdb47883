"""The scheduler's state as Prometheus metrics, read from the policy core at each scrape.

Nothing is pushed into the metrics as events happen: the collector reads a snapshot of the
policy and its tallies (tallies.py) when Prometheus asks, so the rules never wait on it and
the two can never disagree. The names are a contract: dashboards and alerts use them.

Cardinality stays bounded: series labelled by client exist only for clients connected at the
scrape. A client that leaves takes its series with it (and its tallies are forgotten), so a
node that runs thousands of short programs does not grow the metrics without end; the totals
per device keep what they did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from ..core.model.text import GONE, GPU_LIMIT, IDLE, MEMORY, MODE, QUANTUM, RELEASED, REVOKED, SHARE
from ..core.policy import Policy
from ..core.rules.gangs import BROKEN, COMPLETE, FORMING
from ..core.snapshot import ClientSnapshot
from ..core.tallies import TO_DEVICE, TO_HOST, WaitHistogram
from ..version import version
from .mps_metrics import MpsCollector

# Every way a hold ends, as status names it; each device has a series for each from the start,
# so that rates over them need no series to appear first.
END_REASONS = (QUANTUM, SHARE, GPU_LIMIT, MEMORY, MODE, IDLE, RELEASED, REVOKED, GONE)
CLIENT_LABELS = ("device", "client", "pid", "process", "pod", "namespace")


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
                         set(tallies.evictions) | {device for device, _ in tallies.moved})
        by_index = {dev.index: dev for dev in snapshot.devices}

        grants = CounterMetricFamily("gemshare_grants", "Locks granted, by device.",
                                     labels=["device"])
        drops = CounterMetricFamily("gemshare_drops",
                                    "Holds ended, by device and reason (as status names it).",
                                    labels=["device", "reason"])
        revocations = CounterMetricFamily("gemshare_revocations",
                                          "Locks taken back from holders that did not release "
                                          "them in time, by device.", labels=["device"])
        waits = HistogramMetricFamily("gemshare_lock_wait_seconds",
                                      "Time from a lock request to its grant, for requests "
                                      "that had to wait, by device.", labels=["device"])
        queue = GaugeMetricFamily("gemshare_queue_length", "Clients waiting for the lock.",
                                  labels=["device"])
        holders = GaugeMetricFamily("gemshare_holders", "Clients holding the lock.",
                                    labels=["device"])
        evictions = CounterMetricFamily("gemshare_evictions",
                                        "Clients asked to move memory to the host to make room "
                                        "for a grant, by device.", labels=["device"])
        moved = CounterMetricFamily("gemshare_moved_bytes",
                                    "Bytes clients reported moving between device and host.",
                                    labels=["device", "direction"])
        for device in devices:
            name = str(device)
            grants.add_metric([name], policy.grants.get(device, 0))
            for reason in END_REASONS:
                drops.add_metric([name, reason], tallies.ended[device, reason])
            revocations.add_metric([name], tallies.ended[device, REVOKED])
            histogram = tallies.waits.get(device) or WaitHistogram()
            waits.add_metric([name], [(_bound(bound), count)
                                      for bound, count in histogram.cumulative()],
                             histogram.total)
            dev = by_index.get(device)
            queue.add_metric([name], len(dev.waiters) if dev else 0)
            holders.add_metric([name], len(dev.holders) if dev else 0)
            evictions.add_metric([name], tallies.evictions[device])
            for direction in (TO_HOST, TO_DEVICE):
                moved.add_metric([name, direction], tallies.moved[device, direction])

        held = CounterMetricFamily("gemshare_lock_held_seconds",
                                   "Seconds each connected client has held the lock, its "
                                   "running hold included.", labels=list(CLIENT_LABELS))
        allocated = GaugeMetricFamily("gemshare_allocated_bytes",
                                      "Bytes each connected client has allocated.",
                                      labels=list(CLIENT_LABELS))
        running = {}  # (client, device) -> seconds of the hold running now
        for dev in snapshot.devices:
            for cid, seconds in dev.slices.items():
                running[cid, dev.index] = seconds
        for client in snapshot.clients:
            cid = client.registration.id
            times = tallies.held_by(cid)
            for (holder, device), seconds in running.items():
                if holder == cid:
                    times[device] = times.get(device, 0.0) + seconds
            for device, seconds in sorted(times.items()):
                held.add_metric(_client_labels(client, device), seconds)
            for device, count in client.allocated.items():
                allocated.add_metric(_client_labels(client, device), count)

        gangs = GaugeMetricFamily("gemshare_gangs", "Gangs of a distributed job, by state.",
                                  labels=["state"])
        for state in (FORMING, COMPLETE, BROKEN):
            gangs.add_metric([state], sum(1 for gang in snapshot.gangs if gang.state == state))
        connected = GaugeMetricFamily("gemshare_clients_connected", "Registered clients.",
                                      value=len(snapshot.clients))
        build = GaugeMetricFamily("gemshare_build_info", "The scheduler's version.",
                                  labels=["version"])
        build.add_metric([version()], 1)
        yield from (held, grants, drops, revocations, waits, queue, holders, allocated,
                    evictions, moved, connected, gangs, build)


def _client_labels(client: ClientSnapshot, device: int) -> list[str]:
    who = client.registration
    return [str(device), str(who.id), str(who.pid), who.name, who.pod, who.namespace]


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
