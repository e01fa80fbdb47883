"""Helpers for the deploy/ tests: where things are, reading YAML, and rendering the kustomize
base as `kubectl kustomize deploy/kubernetes` does.

The base uses a handful of kustomize's features (resources, namespace, a ConfigMap generator
without hash suffixes, images); `render_base` applies exactly those in Python, so the tests need
no kubectl, and refuses a kustomization that uses any other. Where kubectl is installed, a test
checks that its rendering is the same.
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
KUBECTL = shutil.which("kubectl")
# What render_base knows how to apply; anything else in the kustomization is refused.
KUSTOMIZE_KEYS = {"apiVersion", "kind", "namespace", "resources", "configMapGenerator",
                  "generatorOptions", "images"}
CLUSTER_WIDE = {"Namespace", "ClusterRole", "ClusterRoleBinding", "RuntimeClass",
                "PriorityClass", "CustomResourceDefinition"}


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


def render_base() -> list:
    """The objects `kubectl kustomize deploy/kubernetes` makes."""
    (kustomization,) = parse_yaml((BASE / "kustomization.yaml").read_text())
    unknown = set(kustomization) - KUSTOMIZE_KEYS
    assert not unknown, f"the kustomization uses {unknown}, which render_base does not apply"
    assert kustomization.get("generatorOptions", {}) == {"disableNameSuffixHash": True}
    objects = [doc for name in kustomization["resources"]
               for doc in parse_yaml((BASE / name).read_text())]
    for generator in kustomization.get("configMapGenerator", []):
        assert set(generator) == {"name", "files"}, generator
        objects.append({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": generator["name"]},
                        "data": {Path(f).name: (BASE / f).read_text()
                                 for f in generator["files"]}})
    objects = copy.deepcopy(objects)
    for obj in objects:
        if obj["kind"] not in CLUSTER_WIDE and "namespace" in kustomization:
            obj["metadata"]["namespace"] = kustomization["namespace"]
    for spec in pod_templates(objects).values():
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            container["image"] = _with_image(container["image"],
                                             kustomization.get("images", []))
    return objects


def render_with_kubectl() -> list:
    # An empty kubeconfig: nothing here may reach, or depend on, a cluster.
    result = subprocess.run([KUBECTL, "kustomize", str(BASE)], capture_output=True, text=True,
                            env={**os.environ, "KUBECONFIG": os.devnull}, timeout=60)
    assert result.returncode == 0, f"kubectl kustomize failed:\n{result.stderr}"
    return parse_yaml(result.stdout)
