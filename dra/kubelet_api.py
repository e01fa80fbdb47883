"""The kubelet's DRA gRPC API (`DRAPlugin`: NodePrepareResources, NodeUnprepareResources), in
the versions v1 (Kubernetes 1.34 on) and v1beta1 (1.32 and 1.33, and later kubelets too), as
protobuf messages built at import.

Names, field numbers and types are those of the kubelet's pkg/apis/dra/<version>/api.proto
(tests/kubernetes/upstream holds the copies tests/kubernetes/test_upstream_messages.py checks
them against). The two versions differ only in v1's `Device.share_id`, the share of a device
that a claim got where the device is allocated to several (consumable capacity).
"""

from __future__ import annotations

from functools import cache

from gemshare_nvs.kubernetes.proto_messages import MANY, PRESENT, Field, build, map_of

VERSIONS = ("v1", "v1beta1")
SERVICE = "DRAPlugin"
# What a DRA driver lists in its registration's supported_versions for each version.
SUPPORTED_VERSION = {version: f"{version}.{SERVICE}" for version in VERSIONS}
# request, response of each method of the service
METHODS = {"NodePrepareResources": ("NodePrepareResourcesRequest", "NodePrepareResourcesResponse"),
           "NodeUnprepareResources": ("NodeUnprepareResourcesRequest",
                                      "NodeUnprepareResourcesResponse")}


def package(version: str) -> str:
    return f"k8s.io.kubelet.pkg.apis.dra.{version}"


def _messages(version: str) -> dict[str, list[Field]]:
    device = [Field("request_names", 1, "string", MANY), Field("pool_name", 2, "string"),
              Field("device_name", 3, "string"), Field("cdi_device_ids", 4, "string", MANY)]
    if version == "v1":
        device.append(Field("share_id", 5, "string", PRESENT))
    return {
        "NodePrepareResourcesRequest": [Field("claims", 1, "Claim", MANY)],
        "NodePrepareResourcesResponse": [Field("claims", 1, map_of("NodePrepareResourceResponse"))],
        "NodePrepareResourceResponse": [Field("devices", 1, "Device", MANY),
                                        Field("error", 2, "string")],
        "Device": device,
        "NodeUnprepareResourcesRequest": [Field("claims", 1, "Claim", MANY)],
        "NodeUnprepareResourcesResponse": [
            Field("claims", 1, map_of("NodeUnprepareResourceResponse"))],
        "NodeUnprepareResourceResponse": [Field("error", 1, "string")],
        "Claim": [Field("namespace", 1, "string"), Field("uid", 2, "string"),
                  Field("name", 3, "string")],
    }


MESSAGES = {version: _messages(version) for version in VERSIONS}


@cache
def messages(version: str) -> dict[str, type]:
    """Message name -> class for `version` ("v1" or "v1beta1"); ImportError without protobuf."""
    return build(f"gemshare/dra/{version}.proto", package(version), MESSAGES[version])


def method_path(version: str, method: str) -> str:
    return f"/{package(version)}.{SERVICE}/{method}"
