"""The MPS control daemon's metrics, when the scheduler runs one (--mps): whether it answers,
how often it had to be started again, and how many clients go through it."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

# The series it adds to the node's own (metrics.FIXED_SERIES) with --mps: one per family below.
MPS_SERIES = 3


class MpsCollector(Collector):
    """Reads `status()` (the scheduler's MPS status object) at each scrape."""

    def __init__(self, status: Callable[[], dict]):
        self.status = status

    def collect(self) -> Iterable:
        mps = self.status()
        if not mps.get("enabled"):
            return
        yield GaugeMetricFamily("gemshare_mps_up",
                                "1 while the MPS control daemon answers, else 0.",
                                value=1 if mps.get("running") else 0)
        yield CounterMetricFamily("gemshare_mps_restarts",
                                  "Times the scheduler started the MPS control daemon again "
                                  "after it stopped answering.", value=mps.get("restarts", 0))
        yield GaugeMetricFamily("gemshare_mps_clients",
                                "Connected clients that go through the MPS server.",
                                value=mps.get("clients", 0))
