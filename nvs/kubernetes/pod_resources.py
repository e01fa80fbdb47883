"""What the kubelet allocated to a container: the device IDs its pod-resources API lists for it,
and the CDI devices our DRA driver prepared for the claims it uses (`dynamic_resources`).

`Get` asks for one pod; kubelets before 1.27, and later ones with the KubeletPodResourcesGet
feature gate off, refuse it, and then `List` (every pod on the node) serves, from then on.
`every_container` asks `List` for what all the node's containers were allocated.
"""

from __future__ import annotations

from . import pod_resources_api as api
from .claim_devices import DRIVER
from .grpc_calls import NodeApiError, UnixChannel

# How a kubelet says it has no Get: an older one does not know the method, a newer one with the
# feature gate off answers this (code UNKNOWN).
GET_DISABLED = "Get method disabled"
NO_ANSWER = ("DEADLINE_EXCEEDED", "UNAVAILABLE")


class PodResourcesClient:
    def __init__(self, path: str, timeout_s: float):
        self._channel = UnixChannel(path, timeout_s)  # first: it says what is not installed
        self._messages = api.messages()
        self.path = path
        self.has_get = True  # until the kubelet says otherwise

    def allocated(self, namespace: str, pod: str, container: str) -> tuple[list[str], list[str]]:
        """Every device ID the container was allocated, whatever the resource (device
        plugins), and the CDI device IDs of its claims that our DRA driver prepared (other
        drivers' count for nothing here); empty for a pod or container the kubelet does not
        list. NodeApiError when it does not answer."""
        pods = self._pod(namespace, pod) if self.has_get else None
        if pods is None:
            pods = self._list()
        containers = [resources for entry in pods
                      if entry.name == pod and entry.namespace == namespace
                      for resources in entry.containers if resources.name == container]
        device_ids, claim_ids = [], []
        for resources in containers:
            devices, claims = _ids(resources)
            device_ids += devices
            claim_ids += claims
        return device_ids, claim_ids

    def every_container(self) -> list[tuple[list[str], list[str]]]:
        """The device IDs and our claims' CDI IDs of every container the kubelet lists on the
        node (List), as `allocated` gives them for one. NodeApiError when it does not answer."""
        return [_ids(resources) for entry in self._list() for resources in entry.containers]

    def _pod(self, namespace: str, pod: str) -> list | None:
        """The pod's entry by Get, as a list; None when Get does not serve (List will)."""
        request = self._messages["GetPodResourcesRequest"](pod_name=pod, pod_namespace=namespace)
        try:
            reply = self._channel.call(api.GET, request,
                                       self._messages["GetPodResourcesResponse"])
        except NodeApiError as error:
            if error.code in NO_ANSWER:
                raise
            if error.code == "UNIMPLEMENTED" or GET_DISABLED in error.details:
                self.has_get = False
            return None  # also "pod not found", which List says as well as Get
        return [reply.pod_resources]

    def _list(self) -> list:
        reply = self._channel.call(api.LIST, self._messages["ListPodResourcesRequest"](),
                                   self._messages["ListPodResourcesResponse"])
        return list(reply.pod_resources)

    def close(self) -> None:
        self._channel.close()


def _ids(resources) -> tuple[list[str], list[str]]:
    """A listed container's device IDs, whatever the resource, and the CDI device IDs of its
    claims that our DRA driver prepared."""
    device_ids = [device_id for devices in resources.devices for device_id in devices.device_ids]
    claim_ids = [cdi.name for claim in resources.dynamic_resources
                 for resource in claim.claim_resources if resource.driver_name == DRIVER
                 for cdi in resource.cdi_devices]
    return device_ids, claim_ids
