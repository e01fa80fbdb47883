"""Scraping a test scheduler's Prometheus metrics over HTTP, as Prometheus does.

A test scheduler started with `metrics="127.0.0.1:0"` takes a free port and logs where it
serves; `metrics_url` finds that in its log, and `scrape` reads the samples.
"""

from __future__ import annotations

import re
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

SERVING = re.compile(r"serving metrics on (http://\S+/metrics)")


def metrics_url(scheduler, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = SERVING.search(scheduler.log())
        if found:
            return found[1]
        time.sleep(0.02)
    raise AssertionError(f"the scheduler never said where it serves metrics:\n{scheduler.log()}")


class Samples(dict):
    """sample name -> {frozenset of label items: value}."""

    def value(self, name: str, **labels) -> float:
        return self[name][frozenset((k, str(v)) for k, v in labels.items())]

    def only(self, name: str, **labels) -> float:
        """The value of the one sample of `name` whose labels include `labels`."""
        (value,) = self.labelled(name, **labels).values()
        return value

    def labelled(self, name: str, **labels) -> dict:
        """The samples of `name` whose labels include `labels`."""
        wanted = {(k, str(v)) for k, v in labels.items()}
        return {key: value for key, value in self.get(name, {}).items() if wanted <= key}


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples = Samples()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return samples
