"""deploy/kubernetes: every file parses, the base renders, and the objects it makes fit together:
the commands the containers run, the host paths they expect, the resource name pods ask for."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

import pytest
from deploy_files import BASE, DEPLOY, REPO, parse_yaml

from gemshare_nvs.config import file as config_file
from gemshare_nvs.service.command_line import parse
from gemshare_plugin import cli as plugin_cli

NAMESPACE = "gemshare-system"
RESOURCE = "gemshare.io/gpu"
SOCKET = "/var/run/gemshare/scheduler.sock"
KUBELET_DIR = "/var/lib/kubelet/device-plugins"
HOST_LIBRARY = "/usr/local/lib/gemshare/libnvs.so"  # where the device plugin mounts it from
# The device plugin's options the public contract fixes; the README documents all of them.
CONTRACT_PLUGIN_OPTIONS = {"--kubelet-socket-dir", "--slots", "--resource-name"}
YAML_FILES = sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def one(objects: list, kind: str) -> dict:
    found = [obj for obj in objects if obj["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def options(args: list) -> dict:
    """--name value pairs of a command line that gives every option a value."""
    assert len(args) % 2 == 0 and all(a.startswith("--") for a in args[::2]), args
    return dict(zip(args[::2], args[1::2]))


def mounts(container: dict, volumes: dict) -> dict:
    """mountPath -> the volume mounted there."""
    return {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", [])}


def host_mount(container: dict, volumes: dict, path: str) -> str:
    """The host path behind `path` in the container (which must come from a hostPath volume)."""
    for mount_path, volume in mounts(container, volumes).items():
        inside = PurePosixPath(path)
        if inside == PurePosixPath(mount_path) or PurePosixPath(mount_path) in inside.parents:
            assert "hostPath" in volume, f"{path} in {container['name']} is not a host path"
            rest = inside.relative_to(mount_path)
            return str(PurePosixPath(volume["hostPath"]["path"]) / rest)
    raise AssertionError(f"nothing is mounted at {path} in container {container['name']}")


@pytest.fixture(scope="module")
def pod_spec(rendered) -> dict:
    return one(rendered, "DaemonSet")["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def volumes(pod_spec) -> dict:
    return {volume["name"]: volume for volume in pod_spec["volumes"]}


def container(pod_spec: dict, name: str) -> dict:
    return next(c for c in pod_spec["containers"] if c["name"] == name)


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_file_parses_into_objects_with_a_kind(path):
    documents = parse_yaml(path.read_text())
    assert documents, f"{path} holds no YAML document"
    for document in documents:
        assert isinstance(document, dict) and document.get("apiVersion") and document.get("kind")


def test_kustomization_lists_files_that_exist():
    (kustomization,) = parse_yaml((BASE / "kustomization.yaml").read_text())
    assert kustomization["namespace"] == NAMESPACE
    listed = [*kustomization["resources"],
              *(f for generator in kustomization.get("configMapGenerator", [])
                for f in generator["files"])]
    assert [name for name in listed if not (BASE / name).is_file()] == []
    assert sorted(p.name for p in BASE.glob("*.yaml") if p.name != "kustomization.yaml") \
        == sorted(name for name in kustomization["resources"])


def test_the_image_tag_is_the_project_version():
    (kustomization,) = parse_yaml((BASE / "kustomization.yaml").read_text())
    (image,) = kustomization["images"]
    assert (image["name"], image["newTag"]) == ("gemshare", PROJECT["version"])


def test_base_renders_the_expected_objects(rendered):
    kinds = sorted((obj["apiVersion"], obj["kind"]) for obj in rendered)
    assert kinds == [("apps/v1", "DaemonSet"), ("v1", "ConfigMap"), ("v1", "Namespace"),
                     ("v1", "Service")]
    assert one(rendered, "Namespace")["metadata"]["name"] == NAMESPACE
    assert all(obj["metadata"]["namespace"] == NAMESPACE
               for obj in rendered if obj["kind"] != "Namespace")
    assert not any(obj["kind"] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
                   for obj in rendered)


def test_daemonset_runs_on_gpu_nodes_and_selects_its_pods(rendered, pod_spec):
    daemonset = one(rendered, "DaemonSet")
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert daemonset["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pod_spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod_spec["automountServiceAccountToken"] is False  # no API access wanted or given


def test_every_container_runs_a_command_of_the_image(pod_spec):
    scripts = set(PROJECT["scripts"])
    assert {"gemshare-scheduler", "gemshare-device-plugin"} <= scripts
    everything = [*pod_spec["initContainers"], *pod_spec["containers"]]
    for each in everything:
        assert each["image"].startswith("gemshare:"), each["name"]
        command = each["command"]
        assert command[0] in scripts or command[0] == "/usr/local/bin/gemshare-entrypoint", command
    assert sorted(c["command"][0] for c in pod_spec["containers"]) == [
        "gemshare-device-plugin", "gemshare-scheduler"]


def test_scheduler_arguments_are_its_own_and_its_paths_are_mounted(pod_spec, volumes):
    scheduler = container(pod_spec, "scheduler")
    args = scheduler["args"]
    parsed = parse(args)  # refuses an option, or a value, the scheduler does not take
    given = options(args)
    assert given["--socket"] == SOCKET
    assert host_mount(scheduler, volumes, SOCKET) == SOCKET  # where the plugin's pods look
    assert host_mount(scheduler, volumes, given["--state-dir"]) == given["--state-dir"]
    assert given["--metrics"] == "0.0.0.0:9410" and parsed.metrics is not None
    ports = {p["name"]: p["containerPort"] for p in scheduler["ports"]}
    assert ports == {"metrics": 9410}
    config_dir = str(PurePosixPath(given["--config"]).parent)
    config_volume = mounts(scheduler, volumes)[config_dir]
    assert config_volume["configMap"]["name"] == "gemshare-config"
    assert scheduler["securityContext"]["runAsNonRoot"] is True


def test_the_config_map_holds_a_config_the_scheduler_accepts(rendered, pod_spec, tmp_path):
    config_map = one(rendered, "ConfigMap")
    assert config_map["metadata"]["name"] == "gemshare-config"
    given = options(container(pod_spec, "scheduler")["args"])
    name = PurePosixPath(given["--config"]).name
    path = tmp_path / name
    path.write_text(config_map["data"][name])
    config = config_file.read(path)  # raises on any problem, as the scheduler would refuse it
    assert config.rules


def documented_plugin_options() -> set[str]:
    readme = (REPO / "README.md").read_text()
    table = readme.split("### gemshare-device-plugin options", 1)[1].split("\n\n", 2)[1]
    return set(re.findall(r"^\| `(--[\w-]+)", table, re.M))


def test_device_plugin_arguments_are_its_documented_options(pod_spec, volumes):
    plugin = container(pod_spec, "device-plugin")
    given = options(plugin["args"])
    assert CONTRACT_PLUGIN_OPTIONS <= documented_plugin_options()
    assert CONTRACT_PLUGIN_OPTIONS <= set(given) <= documented_plugin_options()
    assert given["--library"] == HOST_LIBRARY
    assert given.get("--scheduler-socket", SOCKET) == SOCKET
    assert given["--resource-name"] == RESOURCE
    assert int(given["--slots"]) >= 1
    assert given["--kubelet-socket-dir"] == KUBELET_DIR
    assert host_mount(plugin, volumes, KUBELET_DIR) == KUBELET_DIR
    # What it hands to pods is at the host paths it names, as seen from its own container.
    assert host_mount(plugin, volumes, HOST_LIBRARY) == HOST_LIBRARY
    assert host_mount(plugin, volumes, SOCKET) == SOCKET


def test_device_plugin_arguments_parse_with_its_own_parser(pod_spec):
    plugin_cli.parse(container(pod_spec, "device-plugin")["args"])


def test_init_container_puts_the_library_where_the_plugin_mounts_it_from(pod_spec, volumes):
    (init,) = pod_spec["initContainers"]
    assert init["command"][1:] == ["prepare-host", "/host"]
    # prepare-host writes HOST_ROOT/<host path>: each must be that very host path.
    for host_path in (HOST_LIBRARY, SOCKET, "/var/lib/gemshare/settings.json"):
        assert host_mount(init, volumes, f"/host{host_path}") == host_path


def test_metrics_service_scrapes_the_daemonset_pods(rendered, pod_spec):
    service = one(rendered, "Service")
    labels = one(rendered, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    (port,) = service["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (9410, "metrics")
    annotations = one(rendered, "DaemonSet")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "9410"


def test_example_pod_asks_for_one_slot_and_names_itself():
    (pod,) = parse_yaml((BASE / "examples" / "pod.yaml").read_text())
    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    (main,) = pod["spec"]["containers"]
    assert main["resources"]["limits"] == {RESOURCE: 1}
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
           for e in main["env"]}
    assert env["POD_NAME"] == "metadata.name"
    assert env["POD_NAMESPACE"] == "metadata.namespace"


def test_the_resource_name_is_the_same_everywhere():
    named = {match for path in [*YAML_FILES, *DEPLOY.rglob("*.md")]
             for match in re.findall(r"gemshare\.io/[\w.-]+", path.read_text())}
    assert named == {RESOURCE}
