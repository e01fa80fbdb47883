"""deploy/kubernetes-mps: the base with MPS turned on. It changes only what MPS needs, the
scheduler it runs starts the control daemon where the device plugin it runs looks for it, and
the scheduler's pod has what the daemon needs: root with a few capabilities, the host's IPC and
/dev/shm, the NVIDIA runtime's compute files."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import kubernetes_validate
import pytest
from deploy_files import KUBECTL, MPS_OVERLAY, REPO, parse_yaml, pod_templates, render_with_kubectl
from test_kubernetes_manifests import container, host_mount, volumes_of
from test_kubernetes_policies import OLDEST_RELEASE

from gemshare_nvs.config import file as config_file
from gemshare_nvs.config.layers import Layers, command_line_layer
from gemshare_nvs.protocol import Mode
from gemshare_nvs.service.command_line import parse
from gemshare_nvs.service.mps import MpsControl
from gemshare_plugin import cli as plugin_cli
from gemshare_plugin.allocation import SHARED_MEMORY_DIR

SCHEDULER, PLUGIN = "gemshare-scheduler", "gemshare-device-plugin"
# What the control daemon, as root, needs to serve the clients of every user: start each user's
# server as that user, stop servers of other users, reach their servers' files.
MPS_CAPABILITIES = {"SETUID", "SETGID", "KILL", "CHOWN", "FOWNER", "DAC_OVERRIDE"}


def by_name(objects: list) -> dict:
    return {f"{obj['kind']}/{obj['metadata']['name']}": obj for obj in objects}


def differences(before, after, path: tuple = ()) -> set[tuple]:
    """The paths at which two objects differ; list items with a mount path (or else a name)
    are followed by it, other lists compared whole."""
    if isinstance(before, dict) and isinstance(after, dict):
        return {found for key in before.keys() | after.keys()
                for found in differences(before.get(key), after.get(key), (*path, key))}
    if isinstance(before, list) and isinstance(after, list) and \
            all(isinstance(item, dict) for item in before + after):
        key = next((k for k in ("mountPath", "name") if all(k in item for item in before + after)),
                   None)
        if key is not None:
            return differences({item[key]: item for item in before},
                               {item[key]: item for item in after}, path)
    return set() if before == after else {path}


def test_the_overlay_changes_only_what_mps_needs(rendered, rendered_mps):
    base, mps = by_name(rendered), by_name(rendered_mps)
    assert base.keys() == mps.keys()
    changed = {(name, *path) for name in base for path in differences(base[name], mps[name])}
    pod = ("DaemonSet/gemshare-scheduler", "spec", "template", "spec")
    scheduler = (*pod, "containers", "scheduler")
    context = (*scheduler, "securityContext")
    # The base's scheduler runs as root already (for the node's sockets), and its init container
    # hands the directories to root: the overlay adds only the daemon's capabilities.
    assert changed == {
        (*pod, "hostIPC"),
        (*pod, "volumes", "shm"),
        (*scheduler, "args"),
        (*scheduler, "env", "NVIDIA_DRIVER_CAPABILITIES", "value"),
        (*scheduler, "resources", "limits", "memory"),
        (*scheduler, "volumeMounts", "/dev/shm"),
        (*context, "capabilities", "add"),
        ("DaemonSet/gemshare-device-plugin", "spec", "template", "spec", "containers",
         "device-plugin", "args"),
    }
    for pod_name, name, added in ((SCHEDULER, "scheduler", ["--anti-thrash", "auto", "--mps"]),
                                  (PLUGIN, "device-plugin", ["--mps"])):
        before = container(pod_templates(rendered)[pod_name], name)["args"]
        after = container(pod_templates(rendered_mps)[pod_name], name)["args"]
        assert after == [*before, *added]  # options added at the end


def mode_in_force(objects: list, tmp_path: Path) -> Mode:
    """The scheduler's mode as it starts: its command line with the ConfigMap's file over it,
    layered as the scheduler layers them."""
    settings = parse(container(pod_templates(objects)[SCHEDULER], "scheduler")["args"])
    (config_map,) = [obj for obj in objects if obj["kind"] == "ConfigMap"]
    path = tmp_path / settings.config.name
    path.write_text(config_map["data"][settings.config.name])
    return Layers(command_line_layer(settings), config_file.read(path)).value("anti_thrash")


def test_the_overlays_scheduler_runs_in_auto_so_programs_can_go_through_mps(
        rendered, rendered_mps, tmp_path):
    assert mode_in_force(rendered_mps, tmp_path) == Mode.AUTO
    assert mode_in_force(rendered, tmp_path) == Mode.ON  # the base keeps the default


def test_the_plugin_mounts_the_pipe_directory_the_scheduler_makes(rendered_mps):
    pods = pod_templates(rendered_mps)
    scheduler = container(pods[SCHEDULER], "scheduler")
    settings = parse(scheduler["args"])
    assert settings.mps and settings.mps_pipe_directory is None  # it starts its own daemon
    pipe = str(MpsControl.for_scheduler(Path(settings.socket), None).pipe)
    options = plugin_cli.parse(container(pods[PLUGIN], "device-plugin")["args"])
    assert options.mps_pipe_directory == pipe
    # The library hands the driver the path the scheduler reports, and the plugin mounts the
    # host's directory at that same path: the two must be one.
    assert host_mount(scheduler, volumes_of(pods[SCHEDULER]), pipe) == pipe


def test_the_schedulers_pod_shares_the_hosts_ipc_and_shm(rendered_mps):
    pods = pod_templates(rendered_mps)
    spec = pods[SCHEDULER]
    assert spec["hostIPC"] is True and spec["hostPID"] is True
    scheduler = container(spec, "scheduler")
    # The plugin mounts the host's /dev/shm into its containers: the server's must be the same.
    assert host_mount(scheduler, volumes_of(spec), SHARED_MEMORY_DIR) == SHARED_MEMORY_DIR
    (shm,) = [v for v in spec["volumes"] if v.get("hostPath", {}).get("path") == "/dev/shm"]
    assert shm["hostPath"]["type"] == "Directory"
    assert not pods[PLUGIN].get("hostIPC")  # the plugin only names host paths


def test_the_scheduler_runs_as_root_with_only_what_the_daemon_needs(rendered_mps):
    spec = pod_templates(rendered_mps)[SCHEDULER]
    context = container(spec, "scheduler")["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["runAsNonRoot"]) == (0, 0, False)
    assert context["capabilities"]["drop"] == ["ALL"]
    assert set(context["capabilities"]["add"]) == MPS_CAPABILITIES
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert not context.get("privileged")
    # prepare-scheduler hands the directories to the user the scheduler runs as: else the
    # scheduler, root now, refuses a socket directory another user owns.
    (prepare,) = spec["initContainers"]
    assert {e["name"]: e["value"] for e in prepare["env"]} == {"SCHEDULER_USER": "root"}


def test_the_systemd_drop_in_grants_the_same_capabilities():
    drop_in = REPO / "systemd" / "gemshare-scheduler.service.d" / "mps.conf.example"
    (granted,) = [line.split("=", 1)[1].split() for line in drop_in.read_text().splitlines()
                  if line.startswith("CapabilityBoundingSet=")]
    assert {name.removeprefix("CAP_") for name in granted} == MPS_CAPABILITIES


def test_the_nvidia_runtime_gives_the_scheduler_the_mps_programs(rendered_mps):
    scheduler = container(pod_templates(rendered_mps)[SCHEDULER], "scheduler")
    env = {e["name"]: e["value"] for e in scheduler["env"]}
    # compute brings nvidia-cuda-mps-control, nvidia-cuda-mps-server and libcuda; utility NVML.
    assert {"compute", "utility"} <= set(env["NVIDIA_DRIVER_CAPABILITIES"].split(","))
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"


def mebibytes(quantity: str) -> int:
    units = {"Mi": 1, "Gi": 1024}
    return int(quantity[:-2]) * units[quantity[-2:]]


def test_the_schedulers_memory_limit_leaves_room_for_the_mps_servers(rendered, rendered_mps):
    def limit(objects):
        scheduler = container(pod_templates(objects)[SCHEDULER], "scheduler")
        return mebibytes(scheduler["resources"]["limits"]["memory"])
    assert limit(rendered_mps) >= limit(rendered) + 1024


@pytest.mark.parametrize("release", [OLDEST_RELEASE, kubernetes_validate.utils.latest_version()])
def test_every_object_of_the_overlay_fits_the_api_schema(rendered_mps, release):
    for obj in rendered_mps:
        kubernetes_validate.validate(obj, release, strict=True)


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed: the Python rendering "
                                            "alone is checked")
def test_kubectl_kustomize_renders_the_overlay_the_same(rendered_mps):
    def key(obj):
        return obj["kind"], obj["metadata"]["name"]
    assert sorted(render_with_kubectl(MPS_OVERLAY), key=key) == sorted(rendered_mps, key=key)


def test_the_overlay_is_its_kustomization_and_one_patch():
    (kustomization,) = parse_yaml((MPS_OVERLAY / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["../kubernetes"]
    files = sorted(p.name for p in MPS_OVERLAY.iterdir())
    assert files == ["kustomization.yaml", "scheduler.yaml"]
    assert [p["path"] for p in kustomization["patches"] if "path" in p] == ["scheduler.yaml"]


def test_the_readme_says_how_to_turn_it_on_and_what_it_costs():
    readme = (REPO / "README.md").read_text()
    section = readme.split("### Turning on MPS", 1)[1].split("\n## ", 1)[0].split("\n### ")[0]
    assert f"kubectl apply -k {PurePosixPath(MPS_OVERLAY.relative_to(REPO))}" in section
    for words in ("`hostIPC`", "root", "`/dev/shm`", "--mps", *sorted(MPS_CAPABILITIES)):
        assert words in section, words
