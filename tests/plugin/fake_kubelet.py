"""A kubelet for tests: the v1beta1 Registration service on `kubelet.sock`, and the client side.

Like the real one, on each Register it records the request, dials the plugin's endpoint in the
same directory, asks for its options and keeps a ListAndWatch stream open, whose answers it
queues. `stop()` does what a kubelet that goes down and comes back does to the directory: every
socket in it is removed.
"""

from __future__ import annotations

import os
import queue
import threading
from concurrent import futures

import grpc

from gemshare_plugin import api

WAIT_S = 10.0


class Stream:
    """One ListAndWatch stream the fake kubelet holds open to the plugin."""

    def __init__(self, channel: grpc.Channel):
        self.responses: queue.Queue = queue.Queue()
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
                self.responses.put({device.ID: device.health for device in response.devices})
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

    def close(self) -> None:
        self.channel.close()


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
        threading.Thread(target=self._connect, args=(request.endpoint,), daemon=True).start()
        return api.Empty()

    def _connect(self, endpoint: str) -> None:
        client = PluginClient(os.path.join(self.directory, endpoint))
        options = client.call("GetDevicePluginOptions", api.Empty())
        stream = Stream(client.channel)
        with self._changed:
            self.clients.append(client)
            self.options.append(options)
            self.streams.append(stream)
            self._changed.notify_all()

    def wait_for_stream(self, count: int = 1, timeout: float = WAIT_S) -> Stream:
        """The `count`-th ListAndWatch stream, once the plugin registered that often."""
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.streams) >= count, timeout), (
                f"{len(self.streams)} streams after {timeout} s, not {count}")
            return self.streams[count - 1]

    def client(self) -> PluginClient:
        """A client on the endpoint of the last registration."""
        self.wait_for_stream(len(self.registrations) or 1)
        return self.clients[-1]

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
