"""A kubelet for tests, built from the upstream device-plugin API (v1beta1, the messages of
gemshare_plugin.api): the Registration service on `kubelet.sock`, the client side of each
plugin, and the device manager's way of admitting a container.

Like the real one, on each Register it records the request, dials the plugin's endpoint in the
same directory, asks for its options and keeps a ListAndWatch stream open, whose answers it
queues; it keeps one plugin per resource name, the last registered. `stop()` does what a
kubelet that goes down and comes back does to the directory: every socket in it is removed.

`admit(limits)` does what the kubelet's device manager (pkg/kubelet/cm/devicemanager) does for
one container: for each resource in turn (in the order given: the kubelet's is a Go map's, so
none is fixed), the healthy units no other container holds, GetPreferredAllocation over them,
the preferred ones it may take and the rest filled from the others in no particular order, then
Allocate; an error fails the admission with the words the pod's status and events then carry.
The answers are merged as its deviceRunContainerOptions merges them: the first of each
variable and of each mount's container path is kept, and a later one that differs is a
conflict (which the kubelet logs as an error).
"""

from __future__ import annotations

import os
import queue
import threading
from concurrent import futures
from dataclasses import dataclass, field

import grpc

from gemshare_plugin import api

WAIT_S = 10.0
SLOTS = "gemshare.io/gpu"


class Stream:
    """One ListAndWatch stream the fake kubelet holds open to the plugin."""

    def __init__(self, channel: grpc.Channel):
        self.responses: queue.Queue = queue.Queue()
        self.latest: dict[str, str] = {}  # the last list sent, as the kubelet keeps it
        self.listed = threading.Event()  # set once a list came
        self.ended = threading.Event()
        call = channel.unary_stream(api.method_path("DevicePlugin", "ListAndWatch"),
                                    request_serializer=api.Empty.SerializeToString,
                                    response_deserializer=api.ListAndWatchResponse.FromString)
        self._call = call(api.Empty())
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for response in self._call:
                self.latest = {device.ID: device.health for device in response.devices}
                self.listed.set()
                self.responses.put(self.latest)
        except grpc.RpcError:
            pass
        finally:
            self.ended.set()

    def next(self, timeout: float = WAIT_S) -> dict[str, str]:
        """The next list sent: health by device ID."""
        return self.responses.get(timeout=timeout)

    def cancel(self) -> None:
        self._call.cancel()
        self._thread.join(WAIT_S)


class PluginClient:
    """Calls to a plugin's DevicePlugin service, as the kubelet makes them."""

    def __init__(self, path: str):
        self.channel = grpc.insecure_channel(f"unix://{path}")

    def call(self, method: str, request, timeout: float = WAIT_S):
        request_type, response_type, _ = api.message_types("DevicePlugin", method)
        stub = self.channel.unary_unary(api.method_path("DevicePlugin", method),
                                        request_serializer=request_type.SerializeToString,
                                        response_deserializer=response_type.FromString)
        return stub(request, timeout=timeout)

    def allocate(self, *containers: list[str]):
        return self.call("Allocate", api.AllocateRequest(container_requests=[
            api.ContainerAllocateRequest(devices_ids=ids) for ids in containers]))

    def preferred(self, available: list[str], size: int, must_include: list[str] = ()):
        """The IDs the plugin prefers for one container."""
        request = api.PreferredAllocationRequest(container_requests=[
            api.ContainerPreferredAllocationRequest(available_deviceIDs=available,
                                                    must_include_deviceIDs=must_include,
                                                    allocation_size=size)])
        (answer,) = self.call("GetPreferredAllocation", request).container_responses
        return list(answer.deviceIDs)

    def close(self) -> None:
        self.channel.close()


@dataclass
class Link:
    """What the kubelet keeps of one registration: the client, the options, the stream."""
    client: PluginClient
    options: object
    stream: Stream


class AdmissionFailed(Exception):
    """The kubelet refused the pod: the message is what its status and events say."""


@dataclass
class Admission:
    """One container the fake kubelet admitted."""
    devices: dict[str, list[str]] = field(default_factory=dict)  # resource -> its unit IDs
    envs: dict[str, str] = field(default_factory=dict)
    mounts: dict[str, tuple[str, bool]] = field(default_factory=dict)  # path -> (host, ro)
    conflicts: list[str] = field(default_factory=list)

    def merge(self, response) -> None:
        for name, value in response.envs.items():
            if name not in self.envs:
                self.envs[name] = value
            elif self.envs[name] != value:
                self.conflicts.append(f"env {name}: {self.envs[name]!r} then {value!r}")
        for mount in response.mounts:
            kept = self.mounts.setdefault(mount.container_path,
                                          (mount.host_path, mount.read_only))
            if kept[0] != mount.host_path:
                self.conflicts.append(f"mount {mount.container_path}: {kept[0]!r} then "
                                      f"{mount.host_path!r}")


def go_error(error: grpc.RpcError) -> str:
    """A gRPC error as the kubelet (Go) prints it."""
    code = "".join(part.title() for part in error.code().name.split("_"))
    return f"rpc error: code = {code} desc = {error.details()}"


class FakeKubelet:
    def __init__(self, directory: str, refuse: str | None = None):
        self.directory = directory
        self.socket = os.path.join(directory, api.KUBELET_SOCKET)
        self.refuse = refuse  # a reason to refuse every registration with
        self.registrations: list = []  # accepted ones
        self.attempts = 0  # Register calls, refused ones too
        self.options: list = []
        self.streams: list[Stream] = []
        self.clients: list[PluginClient] = []
        self.dial_errors: list[str] = []  # plugins gone before the kubelet could dial them back
        self.links: dict[str, list[Link]] = {}  # resource name -> its links, oldest first
        self.allocated: dict[str, set[str]] = {}  # resource name -> units held by containers
        self._changed = threading.Condition()
        self._server = None

    def start(self) -> "FakeKubelet":
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.unary_unary_rpc_method_handler(
            self._register, request_deserializer=api.RegisterRequest.FromString,
            response_serializer=api.Empty.SerializeToString)
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            api.REGISTRATION_SERVICE, {"Register": handler}),))
        assert self._server.add_insecure_port(f"unix://{self.socket}")
        self._server.start()
        return self

    def _register(self, request, context):
        self.attempts += 1
        if self.refuse:
            # The kubelet answers with a plain Go error, which gRPC sends as UNKNOWN.
            context.abort(grpc.StatusCode.UNKNOWN, self.refuse)
        with self._changed:
            self.registrations.append(request)
            self._changed.notify_all()
        # The real kubelet dials the plugin after answering; so does this one.
        threading.Thread(target=self._connect, args=(request,), daemon=True).start()
        return api.Empty()

    def _connect(self, request) -> None:
        client = PluginClient(os.path.join(self.directory, request.endpoint))
        try:
            options = client.call("GetDevicePluginOptions", api.Empty())
        except grpc.RpcError as error:  # the kubelet logs it and waits for the next Register
            client.close()
            with self._changed:
                self.dial_errors.append(go_error(error))
                self._changed.notify_all()
            return
        stream = Stream(client.channel)
        with self._changed:
            self.clients.append(client)
            self.options.append(options)
            self.streams.append(stream)
            self.links.setdefault(request.resource_name, []).append(
                Link(client, options, stream))
            self._changed.notify_all()

    def wait_for_link(self, count: int = 1, resource: str = SLOTS,
                      timeout: float = WAIT_S) -> Link:
        """The `count`-th registration of `resource`, once its stream is open."""
        with self._changed:
            assert self._changed.wait_for(
                lambda: len(self.links.get(resource, ())) >= count, timeout), (
                f"{len(self.links.get(resource, ()))} registrations of {resource} after "
                f"{timeout} s, not {count}; dialing back failed: {self.dial_errors}")
            return self.links[resource][count - 1]

    def wait_for_stream(self, count: int = 1, resource: str = SLOTS,
                        timeout: float = WAIT_S) -> Stream:
        """The `count`-th ListAndWatch stream of `resource`, once the plugin registered it
        that often."""
        return self.wait_for_link(count, resource, timeout).stream

    def latest_streams(self, count: int, resources) -> dict[str, Stream]:
        """Each of `resources`' `count`-th stream, once each is open and has sent its first
        list (read by its own thread from then on, as the kubelet keeps reading)."""
        streams = {name: self.wait_for_stream(count, resource=name) for name in resources}
        for name, stream in streams.items():
            assert stream.listed.wait(WAIT_S), f"no list of {name} came on stream {count}"
        return streams

    def client(self, resource: str = SLOTS) -> PluginClient:
        """A client on the endpoint of the last registration of `resource`."""
        self.wait_for_link(1, resource)
        return self.links[resource][-1].client

    def admit(self, limits: dict[str, int]) -> Admission:
        """Admit one container asking for `limits` of the plugin's resources, in that order;
        AdmissionFailed as the kubelet words it."""
        admission = Admission()
        try:
            for resource, needed in limits.items():
                admission.devices[resource] = ids = self._allocate_devices(resource, needed)
                try:
                    (response,) = self.client(resource).allocate(ids).container_responses
                except grpc.RpcError as error:
                    raise AdmissionFailed(self._failure(go_error(error))) from None
                admission.merge(response)
        except AdmissionFailed:
            self.release(admission)
            raise
        return admission

    def release(self, admission: Admission) -> None:
        """The container is gone: its units are free again."""
        for resource, ids in admission.devices.items():
            self.allocated.get(resource, set()).difference_update(ids)

    def _allocate_devices(self, resource: str, needed: int) -> list[str]:
        self.wait_for_link(1, resource)
        link = self.links[resource][-1]
        assert link.stream.listed.wait(WAIT_S), f"no list of {resource} came"
        held = self.allocated.setdefault(resource, set())
        available = [device_id for device_id, health in link.stream.latest.items()
                     if health == api.HEALTHY and device_id not in held]
        if len(available) < needed:
            raise AdmissionFailed(self._failure(
                f"requested number of devices unavailable for {resource}. Requested: "
                f"{needed}, Available: {len(available)}"))
        chosen: list[str] = []
        if link.options.get_preferred_allocation_available:
            try:
                preferred = link.client.preferred(available, needed)
            except grpc.RpcError as error:
                raise AdmissionFailed(self._failure(
                    f"device plugin GetPreferredAllocation rpc failed with err: "
                    f"{go_error(error)}")) from None
            chosen = [device_id for device_id in preferred if device_id in available][:needed]
        chosen += [device_id for device_id in available if device_id not in chosen]
        chosen = chosen[:needed]
        held.update(chosen)
        return chosen

    @staticmethod
    def _failure(error: str) -> str:
        return f"Allocate failed due to {error}, which is unexpected"

    def stop(self, remove_sockets: bool = True) -> None:
        for stream in self.streams:
            stream.cancel()
        for client in self.clients:
            client.close()
        if self._server is not None:
            self._server.stop(0).wait(WAIT_S)
            self._server = None
        if remove_sockets:
            for name in os.listdir(self.directory):
                path = os.path.join(self.directory, name)
                if not os.path.isdir(path):
                    os.unlink(path)
