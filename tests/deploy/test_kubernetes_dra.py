"""deploy/kubernetes-dra: the base, the DRA driver's DaemonSet with the API access it uses and no
more, and the DeviceClasses; every object, and the example claim, valid for Kubernetes 1.34 (DRA
GA) and 1.37; the driver's arguments are its options, its directories the kubelet's."""

from __future__ import annotations

import kubernetes_validate
import pytest
from deploy_files import DRA_OVERLAY, KUBECTL, parse_yaml, pod_templates, render, render_with_kubectl
from test_kubernetes_manifests import container, host_mount, volumes_of

from gemshare_dra import cli as dra_cli
from gemshare_dra.claims import WHOLE_PARAMETER
from gemshare_nvs.kubernetes.claim_devices import DRIVER

RELEASES = ("1.34.0", "1.37.0")
DRIVER_SET = "gemshare-dra-driver"
EXAMPLE = DRA_OVERLAY / "examples" / "pod-claim.yaml"


@pytest.fixture(scope="module")
def rendered_dra() -> list:
    return render(DRA_OVERLAY)


def names(objects: list) -> set[tuple[str, str]]:
    return {(obj["kind"], obj["metadata"]["name"]) for obj in objects}


def test_the_overlay_is_the_base_and_the_drivers_objects(rendered, rendered_dra):
    assert names(rendered_dra) - names(rendered) == {
        ("DeviceClass", "gpu.gemshare.io"), ("DeviceClass", "gpu-whole.gemshare.io"),
        ("ServiceAccount", DRIVER_SET), ("ClusterRole", DRIVER_SET),
        ("ClusterRoleBinding", DRIVER_SET), ("DaemonSet", DRIVER_SET)}
    assert names(rendered) <= names(rendered_dra)
    for obj in rendered_dra:
        assert ("namespace" in obj["metadata"]) == \
            (obj["kind"] not in ("Namespace", "DeviceClass", "ClusterRole", "ClusterRoleBinding"))


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_kubectl_kustomize_renders_the_same_objects(rendered_dra):
    def key(obj):
        return obj["kind"], obj["metadata"]["name"]
    assert sorted(render_with_kubectl(DRA_OVERLAY), key=key) == sorted(rendered_dra, key=key)


@pytest.mark.parametrize("release", RELEASES)
def test_every_object_and_the_example_fit_the_api_schema(rendered_dra, release):
    for obj in [*rendered_dra, *parse_yaml(EXAMPLE.read_text())]:
        kubernetes_validate.validate(obj, release, strict=True)


def test_the_driver_and_the_device_plugin_never_run_on_one_node(rendered, rendered_dra):
    base, dra = pod_templates(rendered), pod_templates(rendered_dra)
    assert dra["gemshare-device-plugin"]["nodeSelector"] == {
        **base["gemshare-device-plugin"]["nodeSelector"], "gemshare-device-plugin": "true"}
    assert "nodeSelector" not in dra[DRIVER_SET]
    (term,) = dra[DRIVER_SET]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [
        {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]},
        {"key": "gemshare-device-plugin", "operator": "DoesNotExist"}]
    # Everything else of the base is as the base has it.
    for name in base:
        if name != "gemshare-device-plugin":
            assert dra[name] == base[name]


def test_the_classes_select_the_drivers_devices_and_the_whole_one_says_so(rendered_dra):
    classes = {obj["metadata"]["name"]: obj["spec"] for obj in rendered_dra
               if obj["kind"] == "DeviceClass"}
    for spec in classes.values():
        assert spec["selectors"] == [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]
    assert "config" not in classes[DRIVER]
    assert classes["gpu-whole.gemshare.io"]["config"] == [
        {"opaque": {"driver": DRIVER, "parameters": {WHOLE_PARAMETER: True}}}]


def test_the_driver_runs_with_its_options_on_the_kubelets_directories(rendered_dra):
    spec = pod_templates(rendered_dra)[DRIVER_SET]
    driver = container(spec, "dra-driver")
    assert driver["command"] == ["gemshare-dra-plugin"]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in \
        driver["env"]
    options = dra_cli.parse([*driver["args"], "--node-name", "n"])
    volumes = volumes_of(spec)
    for path in (options.kubelet_plugins_dir, options.kubelet_registry_dir, options.cdi_dir):
        assert host_mount(driver, volumes, path) == path  # the same path on the host
    assert options.kubelet_plugins_dir == "/var/lib/kubelet/plugins"
    assert options.kubelet_registry_dir == "/var/lib/kubelet/plugins_registry"
    # What CDI specs name on the host, the library put there by the init container.
    assert host_mount(driver, volumes, options.library) == options.library
    (installer,) = spec["initContainers"]
    assert host_mount(installer, volumes, "/host" + options.library) == options.library


def test_the_drivers_probes_ask_where_it_answers_and_no_policy_cuts_it_off(rendered_dra):
    spec = pod_templates(rendered_dra)[DRIVER_SET]
    driver = container(spec, "dra-driver")
    options = dra_cli.parse([*driver["args"], "--node-name", "n"])
    (port,) = driver["ports"]
    assert port["containerPort"] == options.health[1] and options.health[0] == "0.0.0.0"
    assert driver["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    assert driver["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    # The base's NetworkPolicy lets the pods it selects reach nothing: the driver must reach
    # the API server.
    (daemonset,) = [obj for obj in rendered_dra if obj["kind"] == "DaemonSet" and
                    obj["metadata"]["name"] == DRIVER_SET]
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    for policy in (obj for obj in rendered_dra if obj["kind"] == "NetworkPolicy"):
        selector = policy["spec"]["podSelector"]["matchLabels"]
        assert not selector.items() <= labels.items(), policy["metadata"]["name"]


def test_the_driver_may_do_what_it_does_and_no_more(rendered_dra):
    (role,) = [obj for obj in rendered_dra if obj["kind"] == "ClusterRole"]
    granted = {(group, resource): set(rule["verbs"]) for rule in role["rules"]
               for group in rule["apiGroups"] for resource in rule["resources"]}
    # dra/api_server.py: read its Node, read, create and replace the slice, read claims.
    assert granted == {("", "nodes"): {"get"},
                       ("resource.k8s.io", "resourceslices"): {"get", "create", "update"},
                       ("resource.k8s.io", "resourceclaims"): {"get"}}
    (binding,) = [obj for obj in rendered_dra if obj["kind"] == "ClusterRoleBinding"]
    spec = pod_templates(rendered_dra)[DRIVER_SET]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": spec["serviceAccountName"],
                                    "namespace": "gemshare-system"}]


def test_the_example_claims_8_gib_and_30_units_of_the_share_class():
    template, pod = parse_yaml(EXAMPLE.read_text())
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == DRIVER
    assert request["exactly"]["capacity"]["requests"] == {"memory": "8Gi", "compute": "30"}
    assert pod["spec"]["resourceClaims"] == [
        {"name": "gpu", "resourceClaimTemplateName": template["metadata"]["name"]}]
    assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu"}]
