"""Which path a pod asking `gemshare.io/gpu-memory` / `gpu-compute` takes on a cluster with the
DRA driver, decided from what the API server's /version says (read through the Kubernetes
client from the stand-in API server at several releases), and said in one line at start."""

from __future__ import annotations

import pytest

from gemshare_dra.api_server import ApiServer
from gemshare_dra.extended_resources import served_here

DEVICE_PLUGIN = "served by the device plugin, on the nodes labelled gemshare-device-plugin=true"


@pytest.mark.parametrize("version, why", [
    ({"major": "1", "minor": "33", "gitVersion": "v1.33.4"},
     "Kubernetes 1.33 (v1.33.4) serves no resource.k8s.io/v1 (GA from 1.34)"),
    ({"major": "1", "minor": "35", "gitVersion": "v1.35.1"},
     "maps no extended resource to devices by default (KEP-5004, beta from 1.36)"),
    ({"major": "1", "minor": "36+", "gitVersion": "v1.36.2-gke.1100"},
     "Kubernetes 1.36 (v1.36.2-gke.1100) maps an extended resource to whole devices only"),
    ({"major": "1", "minor": "38", "gitVersion": "v1.38.0"},
     "(KEP-6406) is alpha from 1.38, off by default"),
    ({"major": "", "minor": "", "gitVersion": "v1.37.3+k3s1"},  # no numbers: from gitVersion
     "Kubernetes 1.37 (v1.37.3+k3s1) maps an extended resource to whole devices only"),
])
def test_the_path_follows_the_api_servers_release(api_server, tmp_path, version, why):
    api_server.version = version
    line = served_here(ApiServer(str(api_server.kubeconfig(tmp_path / "kubeconfig"))))
    assert why in line and DEVICE_PLUGIN in line
    assert any(asked.startswith("GET /version") for asked in api_server.requests)


def test_a_version_it_cannot_read_says_so_and_takes_the_device_plugin(api_server, tmp_path):
    api_server.version = {"platform": "linux/amd64"}
    api = ApiServer(str(api_server.kubeconfig(tmp_path / "kubeconfig")))
    line = served_here(api)
    assert "the API server's version could not be read" in line and DEVICE_PLUGIN in line
    api_server.available.clear()  # and one that does not answer
    line = served_here(api)
    assert "503" in line and DEVICE_PLUGIN in line
