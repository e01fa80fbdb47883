"""Stand-ins for the node's Kubernetes daemons, for tests: a container runtime serving CRI's
RuntimeService.ContainerStatus and a kubelet serving the pod-resources API (List, Get; devices
and DRA claims), each a
real gRPC server on a Unix socket, speaking the messages nvs/kubernetes/ describes; and faked
/proc/PID/cgroup files in the layouts containerd and CRI-O make under cgroup v1 and v2, with
the cgroupfs and systemd drivers.
"""

from __future__ import annotations

import threading
from concurrent import futures
from pathlib import Path

import grpc

from gemshare_nvs.kubernetes import cri_api, pod_resources_api
from gemshare_nvs.kubernetes.device_units import compute_unit_id, memory_unit_id

HOLD_S = 60.0  # the longest a held call waits to be let go


class StandIn:
    """A gRPC server of `service` on the Unix socket `path`, with `methods` (name -> (handler,
    request class, response class)). Set `hold` to make every call wait until it is cleared."""

    def __init__(self, path: Path, service: str, methods: dict):
        self.path = path
        self.calls: list[str] = []  # method names, as called
        self.hold = threading.Event()
        self.hold.set()  # set: calls go through
        handlers = {name: grpc.unary_unary_rpc_method_handler(
            self._held(name, handler), request_deserializer=request.FromString,
            response_serializer=response.SerializeToString)
            for name, (handler, request, response) in methods.items()}
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service,
                                                                                  handlers),))
        assert self._server.add_insecure_port(f"unix://{path}")
        self._server.start()

    def _held(self, name, handler):
        def serve(request, context):
            self.calls.append(name)
            self.hold.wait(HOLD_S)
            return handler(request, context)
        return serve

    def stop(self) -> None:
        self.hold.set()
        self._server.stop(0).wait(5)


class StandInRuntime(StandIn):
    """containerd or CRI-O as far as ContainerStatus goes: it knows the containers `add`ed."""

    def __init__(self, path: Path):
        self.messages = cri_api.messages()
        self.containers: dict[str, dict[str, str]] = {}  # ID -> labels
        super().__init__(path, "runtime.v1.RuntimeService", {"ContainerStatus": (
            self._status, self.messages["ContainerStatusRequest"],
            self.messages["ContainerStatusResponse"])})

    def add(self, container_id: str, namespace: str, pod: str, container: str,
            pod_uid: str = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0") -> None:
        self.containers[container_id] = {
            cri_api.POD_NAMESPACE_LABEL: namespace, cri_api.POD_NAME_LABEL: pod,
            cri_api.CONTAINER_NAME_LABEL: container, cri_api.POD_UID_LABEL: pod_uid}

    def _status(self, request, context):
        labels = self.containers.get(request.container_id)
        if labels is None:
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"an error occurred when try to find container {request.container_id}")
        status = self.messages["ContainerStatus"](
            id=request.container_id, labels=labels,
            metadata=self.messages["ContainerMetadata"](
                name=labels.get(cri_api.CONTAINER_NAME_LABEL, "")))
        return self.messages["ContainerStatusResponse"](status=status)


class StandInKubelet(StandIn):
    """The kubelet's pod-resources API. `get`: "served", "disabled" (a kubelet with the
    KubeletPodResourcesGet feature gate off) or "unknown" (one from before Get)."""

    def __init__(self, path: Path, get: str = "served"):
        self.messages = pod_resources_api.messages()
        self.pods: dict[tuple[str, str], dict[str, list[tuple[str, list[str]]]]] = {}
        # (namespace, pod) -> container -> [(claim, driver, pool, device, CDI device IDs)]
        self.claims: dict[tuple[str, str], dict[str, list[tuple]]] = {}
        m = self.messages
        methods = {"List": (self._list, m["ListPodResourcesRequest"],
                            m["ListPodResourcesResponse"])}
        if get != "unknown":
            methods["Get"] = (self._get if get == "served" else self._disabled,
                              m["GetPodResourcesRequest"], m["GetPodResourcesResponse"])
        super().__init__(path, "v1.PodResourcesLister", methods)

    def allocate(self, namespace: str, pod: str, container: str, resource: str,
                 device_ids: list[str]) -> None:
        self.pods.setdefault((namespace, pod), {}).setdefault(container, []).append(
            (resource, device_ids))

    def prepare_claim(self, namespace: str, pod: str, container: str, claim: str, driver: str,
                      pool: str, device: str, cdi_ids: list[str]) -> None:
        """List a DRA claim's device for the container, as the kubelet does once the claim's
        driver prepared it."""
        self.pods.setdefault((namespace, pod), {}).setdefault(container, [])
        self.claims.setdefault((namespace, pod), {}).setdefault(container, []).append(
            (claim, driver, pool, device, cdi_ids))

    def _pod(self, namespace: str, pod: str):
        m = self.messages
        claims = self.claims.get((namespace, pod), {})
        containers = [m["ContainerResources"](name=name, devices=[
            m["ContainerDevices"](resource_name=resource, device_ids=ids)
            for resource, ids in devices], dynamic_resources=[
            m["DynamicResource"](claim_name=claim, claim_namespace=namespace, claim_resources=[
                m["ClaimResource"](driver_name=driver, pool_name=pool, device_name=device,
                                   cdi_devices=[m["CDIDevice"](name=cdi) for cdi in cdi_ids])])
            for claim, driver, pool, device, cdi_ids in claims.get(name, [])])
            for name, devices in self.pods[namespace, pod].items()]
        return m["PodResources"](name=pod, namespace=namespace, containers=containers)

    def _list(self, request, context):
        return self.messages["ListPodResourcesResponse"](
            pod_resources=[self._pod(*key) for key in self.pods])

    def _get(self, request, context):
        key = (request.pod_namespace, request.pod_name)
        if key not in self.pods:
            context.abort(grpc.StatusCode.UNKNOWN, f"pod {key[1]} in namespace {key[0]} not found")
        return self.messages["GetPodResourcesResponse"](pod_resources=self._pod(*key))

    def _disabled(self, request, context):
        context.abort(grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")


def memory_units(gpu_uuid: str, count: int, unit_mib: int = 1024, first: int = 0) -> list[str]:
    return [memory_unit_id(gpu_uuid, unit_mib, index) for index in range(first, first + count)]


def compute_units(gpu_uuid: str, count: int, first: int = 0) -> list[str]:
    return [compute_unit_id(gpu_uuid, index) for index in range(first, first + count)]


# ----- /proc/PID/cgroup ------------------------------------------------------------------------

V1_CONTROLLERS = ("cpu,cpuacct", "memory", "pids", "devices")


def container_path(driver: str, runtime: str, pod_uid: str, container_id: str,
                   qos: str = "burstable") -> str:
    """The cgroup path of a container as the kubelet (cgroup `driver` cgroupfs or systemd) and
    the `runtime` (containerd or cri-o) name it; `qos` "" for a Guaranteed pod."""
    if driver == "cgroupfs":
        prefix = "crio-" if runtime == "cri-o" else ""
        return "/".join(["/kubepods", *([qos] if qos else []), f"pod{pod_uid}",
                         prefix + container_id])
    scope = f"{'crio' if runtime == 'cri-o' else 'cri-containerd'}-{container_id}.scope"
    uid = pod_uid.replace("-", "_")
    if not qos:
        return f"/kubepods.slice/kubepods-pod{uid}.slice/{scope}"
    return f"/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid}.slice/{scope}"


def cgroup_file(version: int, path: str) -> str:
    """/proc/PID/cgroup for a process in cgroup `path`: a line per hierarchy (v1, the unified
    one last, as hybrid systems have it) or the one unified line (v2)."""
    if version == 2:
        return f"0::{path}\n"
    lines = [f"{number}:{controllers}:{path}"
             for number, controllers in enumerate(("name=systemd", *V1_CONTROLLERS), start=1)]
    return "\n".join([*lines, "0::/"]) + "\n"


def put_in_container(proc: Path, pid: int, text: str) -> None:
    """Make `proc`/PID/cgroup say `text`."""
    (proc / str(pid)).mkdir(parents=True, exist_ok=True)
    (proc / str(pid) / "cgroup").write_text(text)
