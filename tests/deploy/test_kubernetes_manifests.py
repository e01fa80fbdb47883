"""deploy/kubernetes: every file parses, the base renders, and the objects it makes fit together:
the commands the containers run, the host paths they expect, the resources pods ask for, the node
sockets the scheduler reads."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

import pytest
from deploy_files import BASE, DEPLOY, KUBECTL, REPO, parse_yaml, pod_templates, render_with_kubectl
from installed_commands import COMMANDS

from gemshare_nvs.config import file as config_file
from gemshare_nvs.service.command_line import parse
from gemshare_plugin import cli as plugin_cli
from gemshare_plugin.resources import family

NAMESPACE = "gemshare-system"
RESOURCE = "gemshare.io/gpu"
RESOURCES = {RESOURCE, "gemshare.io/gpu-memory", "gemshare.io/gpu-compute"}
SOCKET = "/var/run/gemshare/scheduler.sock"
KUBELET_DIR = "/var/lib/kubelet/device-plugins"
HOST_LIBRARY = "/usr/local/lib/gemshare/libnvs.so"  # where the device plugin mounts it from
SCHEDULER, PLUGIN = "gemshare-scheduler", "gemshare-device-plugin"
# The device plugin's options the public contract fixes; the README documents all of them.
CONTRACT_PLUGIN_OPTIONS = {"--kubelet-socket-dir", "--slots", "--resource-name"}
# Where the scheduler learns what Kubernetes gave a container (docs/kubernetes.md): the kubelet's
# pod-resources socket, named on its command line, and the container runtime's, the first of
# these that exists.
POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
CRI_SOCKETS = ("/run/containerd/containerd.sock", "/var/run/crio/crio.sock")
EXAMPLES = BASE / "examples"
YAML_FILES = sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def one(objects: list, kind: str, name: str | None = None) -> dict:
    found = [obj for obj in objects
             if obj["kind"] == kind and name in (None, obj["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def options(args: list) -> dict:
    """--name value pairs of a command line that gives every option a value."""
    assert len(args) % 2 == 0 and all(a.startswith("--") for a in args[::2]), args
    return dict(zip(args[::2], args[1::2]))


def host_mount(container: dict, volumes: dict, path: str) -> str:
    """The host path behind `path` in the container (which must come from a hostPath volume)."""
    for mount in container.get("volumeMounts", []):
        inside, mount_path = PurePosixPath(path), PurePosixPath(mount["mountPath"])
        if inside == mount_path or mount_path in inside.parents:
            volume = volumes[mount["name"]]
            assert "hostPath" in volume, f"{path} in {container['name']} is not a host path"
            return str(PurePosixPath(volume["hostPath"]["path"]) / inside.relative_to(mount_path))
    raise AssertionError(f"nothing is mounted at {path} in container {container['name']}")


def volumes_of(spec: dict) -> dict:
    return {volume["name"]: volume for volume in spec["volumes"]}


def container(spec: dict, name: str) -> dict:
    return next(c for c in spec["containers"] if c["name"] == name)


@pytest.fixture(scope="module")
def pods(rendered) -> dict:
    return pod_templates(rendered)


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


def test_every_image_is_tagged_with_the_project_version(rendered):
    (kustomization,) = parse_yaml((BASE / "kustomization.yaml").read_text())
    (image,) = kustomization["images"]
    assert (image["name"], image["newTag"]) == ("gemshare", PROJECT["version"])
    tagged = f"gemshare:{PROJECT['version']}"
    for path in BASE.glob("*.yaml"):  # applied without kustomize too, e.g. with kubectl -f
        for spec in pod_templates(parse_yaml(path.read_text())).values():
            for each in [*spec.get("initContainers", []), *spec["containers"]]:
                assert each["image"] == tagged, (path.name, each["name"])
    for spec in pod_templates(rendered).values():
        assert {c["image"] for c in [*spec["initContainers"], *spec["containers"]]} == {tagged}


def test_base_renders_the_expected_objects(rendered):
    kinds = sorted((obj["apiVersion"], obj["kind"], obj["metadata"]["name"]) for obj in rendered)
    assert kinds == [("apps/v1", "DaemonSet", PLUGIN), ("apps/v1", "DaemonSet", SCHEDULER),
                     ("networking.k8s.io/v1", "NetworkPolicy", "gemshare"),
                     ("v1", "ConfigMap", "gemshare-config"), ("v1", "Namespace", NAMESPACE),
                     ("v1", "Service", "gemshare-metrics")]
    assert all(obj["metadata"]["namespace"] == NAMESPACE
               for obj in rendered if obj["kind"] != "Namespace")
    assert not any(obj["kind"] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
                   for obj in rendered)


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed: the Python rendering "
                                            "alone is checked")
def test_kubectl_kustomize_renders_the_same_objects(rendered):
    def key(obj):
        return obj["kind"], obj["metadata"]["name"]
    assert sorted(render_with_kubectl(), key=key) == sorted(rendered, key=key)


def test_both_daemonsets_run_on_gpu_nodes_and_select_their_own_pods(rendered):
    selected = {}
    for name in (SCHEDULER, PLUGIN):
        daemonset = one(rendered, "DaemonSet", name)
        labels = daemonset["spec"]["template"]["metadata"]["labels"]
        selector = daemonset["spec"]["selector"]["matchLabels"]
        assert selector.items() <= labels.items()
        selected[name] = selector
        spec = daemonset["spec"]["template"]["spec"]
        assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert spec["automountServiceAccountToken"] is False  # no API access wanted or given
    assert selected[SCHEDULER] != selected[PLUGIN]


def test_every_container_runs_a_command_of_the_image(pods):
    scripts = COMMANDS
    assert {"gemshare-scheduler", "gemshare-device-plugin"} <= scripts
    for name, spec in pods.items():
        for each in [*spec["initContainers"], *spec["containers"]]:
            command = each["command"]
            assert command[0] in scripts or command[0] == "/usr/local/bin/gemshare-entrypoint"
        assert spec["containers"][0]["command"][0] == name


def test_scheduler_arguments_are_its_own_and_its_paths_are_mounted(pods):
    spec = pods[SCHEDULER]
    scheduler, volumes = container(spec, "scheduler"), volumes_of(spec)
    args = scheduler["args"]
    # Refuses an option, or a value, the scheduler does not take.
    parsed = parse(args)
    given = options(args)
    assert given["--socket"] == SOCKET
    assert host_mount(scheduler, volumes, SOCKET) == SOCKET  # where the plugin's pods look
    assert host_mount(scheduler, volumes, given["--state-dir"]) == given["--state-dir"]
    assert given["--metrics"] == "0.0.0.0:9410" and parsed.metrics is not None
    ports = {p["name"]: p["containerPort"] for p in scheduler["ports"]}
    assert ports == {"metrics": 9410}
    config_dir = str(PurePosixPath(given["--config"]).parent)
    (mount,) = [m for m in scheduler["volumeMounts"] if m["mountPath"] == config_dir]
    assert volumes[mount["name"]]["configMap"]["name"] == "gemshare-config"


def test_node_identity_alone_reaches_the_node_sockets_read_only(pods):
    spec = pods[SCHEDULER]
    scheduler, volumes = container(spec, "scheduler"), volumes_of(spec)
    identity = container(spec, "node-identity")
    assert identity["command"] == ["gemshare-node-identity"]
    given = options(identity["args"])
    assert given["--pod-resources-socket"] == POD_RESOURCES_SOCKET
    # No --cri-socket: the default finds whichever runtime the node has, both being mounted.
    assert "--cri-socket" not in given
    mounts = {m["mountPath"]: m for m in identity["volumeMounts"]}
    for socket in (POD_RESOURCES_SOCKET, *CRI_SOCKETS):
        # At its host path, through its directory (a restarted kubelet or runtime makes a new
        # socket file, which only a directory's mount shows), read-only.
        assert host_mount(identity, volumes, socket) == socket
        directory = str(PurePosixPath(socket).parent)
        assert mounts[directory]["readOnly"] is True
        # The scheduler's container, which serves the socket every GPU pod has, has none.
        assert not any(PurePosixPath(m["mountPath"]) in PurePosixPath(socket).parents
                       for m in scheduler["volumeMounts"]), (socket, scheduler["volumeMounts"])
    for socket in CRI_SOCKETS:  # the runtimes' unmounts must reach the container
        assert mounts[str(PurePosixPath(socket).parent)]["mountPropagation"] == "HostToContainer"
    # The scheduler asks node-identity on a socket of a volume only the two mount.
    asked = options(scheduler["args"])["--node-identity-socket"]
    assert "--cri-socket" not in options(scheduler["args"])
    assert parse(scheduler["args"]).node_identity_socket == asked == given["--socket"]
    directory = str(PurePosixPath(asked).parent)
    (shared,) = {m["name"] for m in scheduler["volumeMounts"] if m["mountPath"] == directory}
    assert mounts[directory]["name"] == shared and "emptyDir" in volumes[shared]
    assert spec["hostPID"] is True  # /proc/PID/cgroup of every pod's programs
    # Those sockets answer root alone; nothing else of root's is kept.
    for each in (scheduler, identity):
        context = each["securityContext"]
        assert (context["runAsUser"], context["runAsNonRoot"]) == (0, False)
        assert context["capabilities"] == {"drop": ["ALL"]}
    (prepare,) = spec["initContainers"]  # which hands the directories to root
    assert {e["name"]: e["value"] for e in prepare["env"]} == {"SCHEDULER_USER": "root"}


def test_the_config_map_holds_a_config_the_scheduler_accepts(rendered, pods, tmp_path):
    config_map = one(rendered, "ConfigMap")
    assert config_map["metadata"]["name"] == "gemshare-config"
    given = options(container(pods[SCHEDULER], "scheduler")["args"])
    name = PurePosixPath(given["--config"]).name
    path = tmp_path / name
    path.write_text(config_map["data"][name])
    config = config_file.read(path)  # raises on any problem, as the scheduler would refuse it
    assert config.rules


def documented_plugin_options() -> set[str]:
    readme = (REPO / "README.md").read_text()
    table = readme.split("### gemshare-device-plugin options", 1)[1].split("\n\n", 2)[1]
    return set(re.findall(r"^\| `(--[\w-]+)", table, re.M))


def test_device_plugin_arguments_are_its_documented_options(pods):
    spec = pods[PLUGIN]
    plugin, volumes = container(spec, "device-plugin"), volumes_of(spec)
    plugin_cli.parse(plugin["args"])  # refuses an option, or a value, the plugin does not take
    given = options(plugin["args"])
    assert CONTRACT_PLUGIN_OPTIONS <= documented_plugin_options()
    assert CONTRACT_PLUGIN_OPTIONS <= set(given) <= documented_plugin_options()
    assert given["--library"] == HOST_LIBRARY == plugin_cli.DEFAULT_LIBRARY
    assert given.get("--scheduler-socket", SOCKET) == SOCKET
    assert given["--resource-name"] == RESOURCE
    assert int(given["--slots"]) >= 1
    parsed = plugin_cli.parse(plugin["args"])
    advertised = family(parsed.resource_name, parsed.slots, parsed.memory_unit,
                        parsed.memory_overcommit)
    assert {resource.name for resource in advertised} == RESOURCES
    assert (parsed.memory_unit, parsed.memory_overcommit) == (1 << 30, 1.0)
    assert given["--kubelet-socket-dir"] == KUBELET_DIR
    assert host_mount(plugin, volumes, KUBELET_DIR) == KUBELET_DIR
    # What it hands to pods is at the host paths it names, as seen from its own container.
    assert host_mount(plugin, volumes, HOST_LIBRARY) == HOST_LIBRARY
    assert host_mount(plugin, volumes, SOCKET) == SOCKET


def test_init_containers_prepare_what_their_pod_uses(pods):
    (install,) = pods[PLUGIN]["initContainers"]
    assert install["command"][1:] == ["install-library", "/host"]
    assert host_mount(install, volumes_of(pods[PLUGIN]), f"/host{HOST_LIBRARY}") == HOST_LIBRARY
    (prepare,) = pods[SCHEDULER]["initContainers"]
    assert prepare["command"][1:] == ["prepare-scheduler", "/host"]
    # prepare-scheduler writes HOST_ROOT/<host path>: each must be that very host path.
    for host_path in (SOCKET, "/var/lib/gemshare/settings.json"):
        assert host_mount(prepare, volumes_of(pods[SCHEDULER]), f"/host{host_path}") == host_path


def test_metrics_service_scrapes_the_scheduler_pods(rendered):
    service = one(rendered, "Service")
    template = one(rendered, "DaemonSet", SCHEDULER)["spec"]["template"]
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    plugin_labels = one(rendered, "DaemonSet", PLUGIN)["spec"]["template"]["metadata"]["labels"]
    assert not service["spec"]["selector"].items() <= plugin_labels.items()
    (port,) = service["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (9410, "metrics")
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "9410"


def test_example_pod_asks_for_one_slot_and_names_itself():
    (pod,) = parse_yaml((BASE / "examples" / "pod.yaml").read_text())
    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    (main,) = pod["spec"]["containers"]
    assert main["resources"]["limits"][RESOURCE] == 1
    assert RESOURCE not in main["resources"].get("requests", {})  # limits alone ask for it
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
           for e in main["env"]}
    assert env["POD_NAME"] == "metadata.name"
    assert env["POD_NAMESPACE"] == "metadata.namespace"


def test_example_pod_asks_for_memory_and_compute_alone():
    (pod,) = parse_yaml((EXAMPLES / "pod-memory-compute.yaml").read_text())
    (main,) = pod["spec"]["containers"]
    limits = main["resources"]["limits"]
    assert (limits["gemshare.io/gpu-memory"], limits["gemshare.io/gpu-compute"]) == (8, 30)
    assert RESOURCE not in limits  # no slot: memory and compute are enough
    assert not set(main["resources"].get("requests", {})) & RESOURCES
    # The scheduler learns the pod from the node: the pod need not name itself.
    assert "env" not in main


def test_the_resource_names_are_the_same_everywhere():
    named = {match for path in [*YAML_FILES, *DEPLOY.rglob("*.md")]
             for match in re.findall(r"gemshare\.io/[\w.-]+", path.read_text())}
    assert named == RESOURCES
