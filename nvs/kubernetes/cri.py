"""The container runtime's word on a container (CRI `ContainerStatus`): its pod, namespace and
name, from the labels the kubelet gives every container it creates."""

from __future__ import annotations

from dataclasses import dataclass

from . import cri_api
from .grpc_calls import UnixChannel


class NotFromKubelet(Exception):
    """The runtime knows the container, but not as one of a Kubernetes pod."""


@dataclass(frozen=True)
class ContainerLabels:
    pod: str
    namespace: str
    container: str
    pod_uid: str


class CriClient:
    """ContainerStatus calls to the runtime at `path` (containerd or CRI-O)."""

    def __init__(self, path: str, timeout_s: float):
        self._channel = UnixChannel(path, timeout_s)  # first: it says what is not installed
        self._messages = cri_api.messages()
        self.path = path

    def container(self, container_id: str) -> ContainerLabels:
        """NodeApiError when the runtime does not answer or knows no such container;
        NotFromKubelet when it has no pod labels."""
        request = self._messages["ContainerStatusRequest"](container_id=container_id)
        reply = self._channel.call(cri_api.CONTAINER_STATUS, request,
                                   self._messages["ContainerStatusResponse"])
        labels = reply.status.labels
        pod = labels.get(cri_api.POD_NAME_LABEL, "")
        namespace = labels.get(cri_api.POD_NAMESPACE_LABEL, "")
        if not pod or not namespace:
            raise NotFromKubelet(f"container {container_id[:12]} has no "
                                 f"{cri_api.POD_NAME_LABEL} or {cri_api.POD_NAMESPACE_LABEL} "
                                 "label")
        name = labels.get(cri_api.CONTAINER_NAME_LABEL, "") or reply.status.metadata.name
        return ContainerLabels(pod, namespace, name, labels.get(cri_api.POD_UID_LABEL, ""))

    def close(self) -> None:
        self._channel.close()
