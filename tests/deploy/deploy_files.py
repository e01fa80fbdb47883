"""Helpers for the deploy/ tests: where things are, reading YAML, and rendering a kustomization
as `kubectl kustomize DIR` does.

The base and the MPS overlay use a handful of kustomize's features (resources, namespace, a
ConfigMap generator without hash suffixes, images, and patches: strategic merge and JSON 6902);
`render` applies exactly those in Python, so the tests need no kubectl, and refuses a
kustomization that uses any other. Where kubectl is installed, a test checks that its rendering
is the same.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
BASE = DEPLOY / "kubernetes"
MPS_OVERLAY = DEPLOY / "kubernetes-mps"
DRA_OVERLAY = DEPLOY / "kubernetes-dra"
KUBECTL = shutil.which("kubectl")
# What render knows how to apply; anything else in the kustomization is refused.
KUSTOMIZE_KEYS = {"apiVersion", "kind", "namespace", "resources", "configMapGenerator",
                  "generatorOptions", "images", "patches"}
# The lists a strategic merge patch merges item by item, by this key; any other list it replaces.
MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name", "volumes": "name",
              "volumeMounts": "mountPath", "ports": "containerPort"}
CLUSTER_WIDE = {"Namespace", "ClusterRole", "ClusterRoleBinding", "RuntimeClass",
                "PriorityClass", "CustomResourceDefinition", "DeviceClass"}


def parse_yaml(text: str) -> list:
    """Every document of a YAML stream (empty ones left out)."""
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def pod_templates(objects: list) -> dict[str, dict]:
    """The pod spec of every workload, by its name."""
    return {obj["metadata"]["name"]: obj["spec"]["template"]["spec"] for obj in objects
            if obj["kind"] in ("DaemonSet", "Deployment", "StatefulSet", "Job")}


def _with_image(image: str, rules: list) -> str:
    name, _, tag = image.partition(":")
    for rule in rules:
        if rule["name"] == name:
            return f"{rule.get('newName', name)}:{rule.get('newTag', tag)}"
    return image


def render(directory: Path = BASE) -> list:
    """The objects `kubectl kustomize DIRECTORY` makes."""
    (kustomization,) = parse_yaml((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - KUSTOMIZE_KEYS
    assert not unknown, f"the kustomization uses {unknown}, which render does not apply"
    objects = []
    for name in kustomization["resources"]:
        path = directory / name
        objects += render(path) if path.is_dir() else parse_yaml(path.read_text())
    if "configMapGenerator" in kustomization:
        assert kustomization.get("generatorOptions") == {"disableNameSuffixHash": True}
    for generator in kustomization.get("configMapGenerator", []):
        assert set(generator) == {"name", "files"}, generator
        objects.append({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": generator["name"]},
                        "data": {Path(f).name: (directory / f).read_text()
                                 for f in generator["files"]}})
    objects = copy.deepcopy(objects)
    for patch in kustomization.get("patches", []):
        _apply_patch(objects, patch, directory)
    for obj in objects:
        if obj["kind"] not in CLUSTER_WIDE and "namespace" in kustomization:
            obj["metadata"]["namespace"] = kustomization["namespace"]
    for spec in pod_templates(objects).values():
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            container["image"] = _with_image(container["image"],
                                             kustomization.get("images", []))
    return objects


def _apply_patch(objects: list, patch: dict, directory: Path) -> None:
    """One entry of `patches:`, applied to the object it targets: a file or inline text, holding
    a strategic merge patch (an object) or JSON 6902 operations (a list, with a target)."""
    assert set(patch) in ({"path"}, {"target", "patch"}), patch
    (body,) = parse_yaml((directory / patch["path"]).read_text() if "path" in patch
                         else patch["patch"])
    if isinstance(body, dict):
        target = {"kind": body["kind"], "name": body["metadata"]["name"]}
    else:
        target = patch["target"]
        assert set(target) == {"kind", "name"}, target
    matched = [obj for obj in objects if obj["kind"] == target["kind"]
               and obj["metadata"]["name"] == target["name"]]
    assert len(matched) == 1, f"the patch's target {target} matches {len(matched)} objects"
    if isinstance(body, dict):
        _merge(matched[0], body)
    else:
        for operation in body:
            _apply_operation(matched[0], operation)


def _merge(into: dict, patch: dict) -> None:
    """A strategic merge patch, as kustomize applies it to these manifests: maps merge, the
    MERGE_KEYS lists merge item by item (the patch's items first, as kustomize orders them),
    other values are replaced."""
    for key, value in patch.items():
        assert not key.startswith("$"), f"render does not apply the directive {key}"
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif isinstance(value, list) and key in MERGE_KEYS and key in into:
            by = MERGE_KEYS[key]
            merged = []
            for item in value:
                found = [old for old in into[key] if old[by] == item[by]]
                base = copy.deepcopy(found[0]) if found else {}
                _merge(base, item)
                merged.append(base)
            ours = {item[by] for item in value}
            into[key] = merged + [old for old in into[key] if old[by] not in ours]
        else:
            into[key] = copy.deepcopy(value)


def _apply_operation(obj: dict, operation: dict) -> None:
    """One JSON 6902 operation: test, add or replace (what the overlays use)."""
    *parents, last = [step.replace("~1", "/").replace("~0", "~")
                      for step in operation["path"].split("/")[1:]]
    holder = obj
    for step in parents:
        holder = holder[int(step)] if isinstance(holder, list) else holder[step]
    op, value = operation["op"], operation.get("value")
    assert op in ("test", "add", "replace"), f"render does not apply the operation {op}"
    if isinstance(holder, list):
        last = len(holder) if last == "-" else int(last)
    if op == "test":
        assert holder[last] == value, f"{operation['path']} is not {value!r}"
    elif op == "add" and isinstance(holder, list):
        holder.insert(last, copy.deepcopy(value))
    else:
        holder[last] = copy.deepcopy(value)


def render_with_kubectl(directory: Path = BASE) -> list:
    # An empty kubeconfig: nothing here may reach, or depend on, a cluster.
    result = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True,
                            text=True, env={**os.environ, "KUBECONFIG": os.devnull}, timeout=60)
    assert result.returncode == 0, f"kubectl kustomize failed:\n{result.stderr}"
    return parse_yaml(result.stdout)
