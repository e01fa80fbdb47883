"""The kubelet's pod-resources API, `v1`: what devices each container of a pod was allocated
(PodResourcesLister's List, and Get where the kubelet offers it).

Field numbers are those of kubernetes' staging/src/k8s.io/kubelet/pkg/apis/podresources/v1/
api.proto (checked against its copy in tests/kubernetes/upstream); fields the scheduler does
not read (CPUs, memory, topology) are left out (protobuf skips them on the wire). A container's
`dynamic_resources` are its DRA claims: each device a driver prepared for it, and the CDI
devices that driver gave it.
"""

from __future__ import annotations

from functools import cache

from .proto_messages import MANY, PRESENT, Field, build

PACKAGE = "v1"
LIST = f"/{PACKAGE}.PodResourcesLister/List"
GET = f"/{PACKAGE}.PodResourcesLister/Get"

MESSAGES = {
    "ListPodResourcesRequest": [],
    "ListPodResourcesResponse": [Field("pod_resources", 1, "PodResources", MANY)],
    "GetPodResourcesRequest": [Field("pod_name", 1, "string"), Field("pod_namespace", 2, "string")],
    "GetPodResourcesResponse": [Field("pod_resources", 1, "PodResources")],
    "PodResources": [Field("name", 1, "string"), Field("namespace", 2, "string"),
                     Field("containers", 3, "ContainerResources", MANY)],
    "ContainerResources": [Field("name", 1, "string"),
                           Field("devices", 2, "ContainerDevices", MANY),
                           Field("dynamic_resources", 5, "DynamicResource", MANY)],
    "ContainerDevices": [Field("resource_name", 1, "string"),
                         Field("device_ids", 2, "string", MANY)],
    "DynamicResource": [Field("claim_name", 2, "string"), Field("claim_namespace", 3, "string"),
                        Field("claim_resources", 4, "ClaimResource", MANY)],
    "ClaimResource": [Field("cdi_devices", 1, "CDIDevice", MANY), Field("driver_name", 2, "string"),
                      Field("pool_name", 3, "string"), Field("device_name", 4, "string"),
                      Field("share_id", 5, "string", PRESENT)],
    "CDIDevice": [Field("name", 1, "string")],
}


@cache
def messages() -> dict[str, type]:
    """Message name -> class; ImportError without protobuf."""
    return build("gemshare/podresources/v1.proto", PACKAGE, MESSAGES)
