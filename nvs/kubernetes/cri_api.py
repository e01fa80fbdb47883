"""The part of the container runtime interface (CRI, `runtime.v1`) the scheduler uses: the
RuntimeService's ContainerStatus, which names a container's pod.

Field numbers are those of kubernetes' staging/src/k8s.io/cri-api/pkg/apis/runtime/v1/api.proto;
fields the scheduler does not read are left out (protobuf skips them on the wire).
"""

from __future__ import annotations

from functools import cache

from .proto_messages import MAP, Field, build

PACKAGE = "runtime.v1"
CONTAINER_STATUS = f"/{PACKAGE}.RuntimeService/ContainerStatus"
# The labels the kubelet gives every container it creates (pkg/kubelet/types/labels.go).
POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
POD_UID_LABEL = "io.kubernetes.pod.uid"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"

MESSAGES = {
    "ContainerStatusRequest": [Field("container_id", 1, "string"), Field("verbose", 2, "bool")],
    "ContainerStatusResponse": [Field("status", 1, "ContainerStatus"), Field("info", 2, MAP)],
    "ContainerMetadata": [Field("name", 1, "string"), Field("attempt", 2, "uint32")],
    "ContainerStatus": [Field("id", 1, "string"), Field("metadata", 2, "ContainerMetadata"),
                        Field("labels", 12, MAP), Field("annotations", 13, MAP)],
}


@cache
def messages() -> dict[str, type]:
    """Message name -> class; ImportError without protobuf."""
    return build("gemshare/cri/runtime_v1.proto", PACKAGE, MESSAGES)
