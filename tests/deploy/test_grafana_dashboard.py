"""deploy/grafana: the dashboard is valid JSON and queries only the metrics the scheduler serves,
by the labels they carry."""

from __future__ import annotations

import json
import re

import pytest
from deploy_files import DEPLOY

from gemshare_nvs.observe.metrics import CLIENT_LABELS, DEVICE_LABELS

DASHBOARD = DEPLOY / "grafana" / "gemshare-dashboard.json"
DEVICE = set(DEVICE_LABELS)
CLIENT = set(CLIENT_LABELS)
# Every metric of `gemshare-scheduler --metrics`, with its labels.
METRICS = {
    "gemshare_lock_held_seconds_total": CLIENT,
    "gemshare_grants_total": DEVICE,
    "gemshare_drops_total": DEVICE | {"reason"},
    "gemshare_revocations_total": DEVICE,
    "gemshare_lock_wait_seconds": DEVICE | {"le"},
    "gemshare_queue_length": DEVICE,
    "gemshare_holders": DEVICE,
    "gemshare_allocated_bytes": CLIENT,
    "gemshare_evictions_total": DEVICE,
    "gemshare_moved_bytes_total": DEVICE | {"direction"},
    "gemshare_clients_connected": set(),
    "gemshare_view_only_connected": set(),
    "gemshare_gangs": {"state"},
}
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
SCRAPE_LABELS = {"instance", "job"}  # added by Prometheus to every series


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict) -> list:
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))  # inside collapsed rows
    return found


def queries(dashboard: dict) -> list[str]:
    exprs = [target["expr"] for panel in panels(dashboard) for target in panel.get("targets", [])]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            exprs.append(query["query"] if isinstance(query, dict) else query)
    return exprs


def metric(series: str) -> str:
    for suffix in HISTOGRAM_SERIES:
        base = series.removesuffix(suffix)
        if base != series and base in METRICS:
            return base
    return series


def test_dashboard_is_a_grafana_dashboard(dashboard):
    assert dashboard["title"] and dashboard["uid"]
    assert isinstance(dashboard["schemaVersion"], int)
    ids = [panel["id"] for panel in panels(dashboard)]
    assert len(ids) == len(set(ids))
    for panel in panels(dashboard):
        if panel["type"] != "row":
            assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"])


def test_every_queried_metric_is_one_the_scheduler_serves(dashboard):
    used = {metric(name) for expr in queries(dashboard)
            for name in re.findall(r"\bgemshare_\w+", expr)}
    assert used - METRICS.keys() == set()
    assert METRICS.keys() - used == set(), "metrics the dashboard never shows"


def test_aggregations_group_by_labels_the_metric_has(dashboard):
    for expr in queries(dashboard):
        names = {metric(name) for name in re.findall(r"\bgemshare_\w+", expr)}
        have = set().union(*(METRICS[name] for name in names)) | SCRAPE_LABELS
        for group in re.findall(r"\bby\s*\(([^)]*)\)", expr):
            labels = {label.strip() for label in group.split(",") if label.strip()}
            assert labels <= have, f"{expr}: no label {labels - have}"
        for label in re.findall(r'(\w+)\s*(?:=~|!~|!=|=)\s*"', expr):
            assert label in have, f"{expr}: no label {label}"


def test_gpu_share_is_the_rate_of_lock_time_by_pod_and_by_process(dashboard):
    shares = [expr for expr in queries(dashboard) if "gemshare_lock_held_seconds_total" in expr]
    assert all(expr.replace(" ", "").count("rate(gemshare_lock_held_seconds_total") == 1
               for expr in shares)
    groups = [set(re.search(r"by \(([^)]*)\)", expr)[1].replace(" ", "").split(","))
              for expr in shares]
    assert any({"namespace", "pod"} <= group for group in groups)
    assert any({"process", "label"} <= group for group in groups)


def test_every_aggregation_keeps_each_node_apart(dashboard):
    """GPU 0 of one node is not GPU 0 of another: every panel that sums series of a device keeps
    the instance and the device apart."""
    exprs = [target["expr"] for panel in panels(dashboard) for target in panel.get("targets", [])]
    for expr in exprs:
        names = {metric(name) for name in re.findall(r"\bgemshare_\w+", expr)}
        if not any(METRICS[name] for name in names):  # plain totals such as clients connected
            continue
        groups = re.findall(r"\bby\s*\(([^)]*)\)", expr)
        assert groups, f"{expr}: aggregates away every label"
        for group in groups:
            labels = {label.strip() for label in group.split(",")}
            assert "instance" in labels, f"{expr}: sums over nodes"
            if any("device" in METRICS[name] for name in names):
                assert "device" in labels, f"{expr}: sums over GPUs"


def test_lock_wait_quantiles_come_from_the_histogram(dashboard):
    quantiles = [expr for expr in queries(dashboard) if "gemshare_lock_wait_seconds" in expr]
    found = {float(q) for expr in quantiles
             for q in re.findall(r"histogram_quantile\(\s*([\d.]+)\s*,", expr)}
    assert found == {0.5, 0.99}
    assert all("gemshare_lock_wait_seconds_bucket" in expr and "le" in expr for expr in quantiles)
