"""Helpers for the deploy/ tests: where things are, and reading YAML without guessing at it.

YAML is read with PyYAML when this interpreter has it, else by kubectl (which converts it to JSON
offline); with neither, the tests that need it are skipped with that reason. The rendered base
needs kubectl (kustomize is built into it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
BASE = DEPLOY / "kubernetes"
KUBECTL = shutil.which("kubectl")

try:
    import yaml
except ImportError:
    yaml = None


def _kubectl(*args: str, stdin: str | None = None) -> str:
    # An empty kubeconfig: nothing here may reach, or depend on, a cluster.
    env = {**os.environ, "KUBECONFIG": os.devnull}
    result = subprocess.run([KUBECTL, *args], input=stdin, capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 0, f"kubectl {' '.join(args)} failed:\n{result.stderr}"
    return result.stdout


def _json_stream(text: str) -> list:
    decoder, documents, at = json.JSONDecoder(), [], 0
    while (at := len(text) - len(text[at:].lstrip())) < len(text):
        document, at = decoder.raw_decode(text, at)
        documents.append(document)
    return documents


def parse_yaml(text: str) -> list:
    """Every document of a YAML stream (empty ones left out)."""
    if yaml is not None:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    if KUBECTL is None:
        pytest.skip("reading YAML needs PyYAML in this interpreter or kubectl on PATH; "
                    "neither is here")
    # A merge patch of nothing, applied locally: kubectl's own YAML reader, printed as JSON.
    return _json_stream(_kubectl("patch", "--local", "-f", "-", "--type", "merge", "-p", "{}",
                                 "-o", "json", stdin=text))


def render_base() -> str:
    if KUBECTL is None:
        pytest.skip("kubectl is not on PATH: cannot render the kustomize base")
    return _kubectl("kustomize", str(BASE))
