"""deploy/kubernetes as cluster operators and their scanners expect it: what checkov's Kubernetes
checks look for (seccomp, probes, requests and limits, tagged images, no privilege to spare),
Pod Security admission, the runtime class, and the API schemas of the Kubernetes releases.

checkov itself is not a test dependency (about 90 packages, one of them pinned below the
version the project uses); these checks are written out here instead, each a little stricter
than its checkov counterpart where the manifests allow it.
"""

from __future__ import annotations

import re

import kubernetes_validate
import pytest
from deploy_files import BASE, parse_yaml, pod_templates

from gemshare_nvs.observe.metrics_http import PATH as METRICS_PATH
from gemshare_nvs.observe.metrics_http import READY_PATH
from gemshare_nvs.observe.tcp_address import parse_address
from gemshare_plugin.health import LIVENESS, READINESS

SCHEDULER, PLUGIN = "gemshare-scheduler", "gemshare-device-plugin"
RUNTIME_CLASS = "nvidia"
EXAMPLE_PODS = sorted((BASE / "examples").glob("*.yaml"))
# The oldest Kubernetes release the manifests are for (RuntimeDefault seccomp in the pod's
# securityContext is GA since 1.19), and the newest whose schemas kubernetes-validate carries.
OLDEST_RELEASE = "1.25"


def all_containers(spec: dict) -> list[dict]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def every_container(rendered):
    return [(name, each) for name, spec in pod_templates(rendered).items()
            for each in all_containers(spec)]


def test_the_namespace_admits_the_privileged_level_it_needs(rendered):
    (namespace,) = [obj for obj in rendered if obj["kind"] == "Namespace"]
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    # Only because something here needs it: the scheduler's hostPID, the hostPath volumes.
    specs = pod_templates(rendered).values()
    assert any(spec.get("hostPID") for spec in specs)
    assert any("hostPath" in volume for spec in specs for volume in spec["volumes"])


def test_only_the_scheduler_shares_the_hosts_process_ids(rendered):
    shared = {name for name, spec in pod_templates(rendered).items() if spec.get("hostPID")}
    assert shared == {SCHEDULER}
    spec = pod_templates(rendered)[SCHEDULER]
    # hostPID is the pod's: beside the scheduler only node-identity, which must make the
    # scheduler's pod not ready when the runtime's socket is missing (so it cannot be a pod
    # of its own), and which takes container IDs, never pids.
    assert [c["name"] for c in spec["containers"]] == ["scheduler", "node-identity"]
    for spec in pod_templates(rendered).values():
        assert not spec.get("hostNetwork") and not spec.get("hostIPC")


def test_every_pod_runs_under_the_runtimes_default_seccomp_profile(rendered):
    for name, spec in pod_templates(rendered).items():
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for each in all_containers(spec):  # no container opts out
            profile = each.get("securityContext", {}).get("seccompProfile")
            assert profile in (None, {"type": "RuntimeDefault"}), (name, each["name"])


@pytest.mark.parametrize("kind", ["requests", "limits"])
def test_every_container_has_cpu_and_memory_requests_and_limits(rendered, kind):
    for name, each in every_container(rendered):
        assert {"cpu", "memory"} <= set(each["resources"][kind]), (name, each["name"])


def test_every_container_holds_no_privilege_to_spare(rendered):
    for name, each in every_container(rendered):
        context = each["securityContext"]
        assert context["allowPrivilegeEscalation"] is False, (name, each["name"])
        assert context["readOnlyRootFilesystem"] is True, (name, each["name"])
        assert context["capabilities"]["drop"] == ["ALL"], (name, each["name"])
        assert not context.get("privileged"), (name, each["name"])
        # Added back: only what the scheduler's init container needs to hand directories over.
        added = set(context["capabilities"].get("add", []))
        assert added <= {"CHOWN", "FOWNER"}, (name, each["name"])
        assert not added or each["name"] == "prepare-dirs", (name, each["name"])


def test_every_image_names_a_tag(rendered):
    for name, each in every_container(rendered):
        image, _, tag = each["image"].partition(":")
        assert tag and tag != "latest" and "/" not in tag, (name, each["image"])


def probe_ports(each: dict, probe: str) -> tuple[str, int]:
    """(path, container port) an httpGet probe asks."""
    get = each[probe]["httpGet"]
    ports = {p["name"]: p["containerPort"] for p in each["ports"]}
    return get["path"], ports.get(get["port"], get["port"])


def option(args: list, name: str) -> str:
    return args[args.index(name) + 1]


def test_the_schedulers_probes_ask_its_metrics_where_it_serves_them(rendered):
    scheduler, identity = pod_templates(rendered)[SCHEDULER]["containers"]
    port = parse_address(option(scheduler["args"], "--metrics"))[1]
    assert probe_ports(scheduler, "livenessProbe") == (METRICS_PATH, port)
    assert probe_ports(scheduler, "readinessProbe") == (READY_PATH, port)
    # And the pod's readiness is node-identity's too: not ready while the runtime's socket is
    # missing.
    port = parse_address(option(identity["args"], "--health"))[1]
    assert probe_ports(identity, "livenessProbe") == (LIVENESS, port)
    assert probe_ports(identity, "readinessProbe") == (READINESS, port)


def test_the_plugins_probes_ask_its_health_endpoint_where_it_serves_it(rendered):
    (plugin,) = pod_templates(rendered)[PLUGIN]["containers"]
    port = parse_address(option(plugin["args"], "--health"))[1]
    assert probe_ports(plugin, "livenessProbe") == (LIVENESS, port)
    assert probe_ports(plugin, "readinessProbe") == (READINESS, port)


def test_the_network_policy_opens_only_the_ports_the_pods_serve_and_no_way_out(rendered):
    (policy,) = [obj for obj in rendered if obj["kind"] == "NetworkPolicy"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    served = set()
    for name, spec in pod_templates(rendered).items():
        daemonset = next(obj for obj in rendered if obj["metadata"]["name"] == name)
        assert selector.items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()
        served |= {(p["containerPort"], p["protocol"]) for c in spec["containers"]
                   for p in c.get("ports", [])}
    (ingress,) = policy["spec"]["ingress"]
    assert {(p["port"], p["protocol"]) for p in ingress["ports"]} == served
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert policy["spec"]["egress"] == []


def examples() -> list[dict]:
    return [obj for path in EXAMPLE_PODS for obj in parse_yaml(path.read_text())]


def test_every_pod_and_the_examples_run_under_the_nvidia_runtime_class(rendered):
    for name, spec in pod_templates(rendered).items():
        assert spec["runtimeClassName"] == RUNTIME_CLASS, name
    assert len(EXAMPLE_PODS) >= 2
    for example in examples():
        assert example["spec"]["runtimeClassName"] == RUNTIME_CLASS


def test_the_readme_says_what_the_manifests_rely_on(rendered):
    readme = (BASE.parents[1] / "README.md").read_text()
    deploying = readme.split("### Deploying on Kubernetes", 1)[1].split("\n## ", 1)[0]
    for spec in pod_templates(rendered).values():
        for label in spec["nodeSelector"]:
            assert f"`{label}" in deploying
    assert f"`runtimeClassName: {RUNTIME_CLASS}`" in deploying
    assert "GPU Feature Discovery" in deploying
    assert "pod-security.kubernetes.io/enforce" in deploying
    assert re.search(r"NVIDIA's (own )?device plugin", deploying)


@pytest.mark.parametrize("release", [OLDEST_RELEASE, kubernetes_validate.utils.latest_version()])
def test_every_object_fits_the_api_schema(rendered, release):
    for obj in [*rendered, *examples()]:
        # strict: a misspelt or misplaced field is an error, not something the API drops.
        kubernetes_validate.validate(obj, release, strict=True)


def test_the_schema_check_finds_a_misplaced_field(rendered):
    (daemonset, *_) = [obj for obj in rendered if obj["kind"] == "DaemonSet"]
    broken = {**daemonset, "spec": {**daemonset["spec"], "runtimeClassName": RUNTIME_CLASS}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, OLDEST_RELEASE, strict=True)
