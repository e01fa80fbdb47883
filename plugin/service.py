"""The DevicePlugin service the kubelet calls for one resource: options, the unit list,
allocation.

Every answer comes from the DeviceList, the placement the three resources share and the paths
given at start; nothing here blocks on the scheduler or on NVML.
"""

from __future__ import annotations

import logging
import threading

import grpc

from . import api
from .allocation import Paths, UnknownDevices, container_response, units_by_gpu
from .devices import DeviceList
from .placement import NoRoom, Placement

log = logging.getLogger("gemshare-device-plugin")

# The kubelet keeps one ListAndWatch stream open; a few more are allowed (a restarting kubelet,
# a debugging client), but not so many that they take every worker thread from Allocate.
MAX_STREAMS = 4
STREAM_CHECK_S = 1.0


class DevicePluginService:
    def __init__(self, devices: DeviceList, paths: Paths, placement: Placement):
        self.devices = devices
        self.resource = devices.resource
        self.paths = paths
        self.placement = placement
        self.stopping = threading.Event()
        self._streams = 0
        self._lock = threading.Lock()

    def handler(self) -> grpc.GenericRpcHandler:
        handlers = {}
        for method, *_ in api.SERVICES["DevicePlugin"]:
            request_type, response_type, streams = api.message_types("DevicePlugin", method)
            make = (grpc.unary_stream_rpc_method_handler if streams
                    else grpc.unary_unary_rpc_method_handler)
            handlers[method] = make(getattr(self, method),
                                    request_deserializer=request_type.FromString,
                                    response_serializer=response_type.SerializeToString)
        return grpc.method_handlers_generic_handler(api.DEVICE_PLUGIN_SERVICE, handlers)

    def stop(self) -> None:
        """End every ListAndWatch stream, for good: the server is going away, and a later serve
        makes a service of its own."""
        self.stopping.set()
        self.devices.wake()

    def GetDevicePluginOptions(self, request, context):
        return api.DevicePluginOptions(pre_start_required=False,
                                       get_preferred_allocation_available=True)

    def ListAndWatch(self, request, context):
        with self._lock:
            if self._streams >= MAX_STREAMS:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              f"already {MAX_STREAMS} ListAndWatch streams open")
            self._streams += 1
        context.add_callback(self.devices.wake)
        log.debug("a ListAndWatch stream opened")
        try:
            generation, devices = self.devices.snapshot()
            yield api.ListAndWatchResponse(devices=devices)
            while context.is_active() and not self.stopping.is_set():
                if self.devices.wait(generation, STREAM_CHECK_S):
                    generation, devices = self.devices.snapshot()
                    yield api.ListAndWatchResponse(devices=devices)
        finally:
            with self._lock:
                self._streams -= 1
            log.debug("a ListAndWatch stream ended")

    def GetPreferredAllocation(self, request, context):
        responses = []
        for wanted in request.container_requests:
            try:
                chosen = self.placement.prefer(self.resource, list(wanted.available_deviceIDs),
                                               list(wanted.must_include_deviceIDs),
                                               wanted.allocation_size)
            except NoRoom as exc:
                log.warning("refused a request: %s", exc)
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
            responses.append(api.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return api.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request, context):
        indices, counts = self.devices.layout()
        responses = []
        for number, wanted in enumerate(request.container_requests):
            try:
                units = units_by_gpu(self.resource, wanted.devices_ids, counts, indices)
            except UnknownDevices as exc:
                log.warning("refused an allocation: %s", exc)
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"container request {number}: {exc}")
            responses.append(container_response(units, self.paths))
            self.placement.allocated(self.resource, list(wanted.devices_ids))
            self._say(units)
        return api.AllocateResponse(container_responses=responses)

    def _say(self, units: dict[str, int]) -> None:
        """Log an allocation, and how it is split where a budget is split over GPUs."""
        shown = ", ".join(f"{count} on {self.devices.named(uuid)}" for uuid, count in units.items())
        amount = self.resource.amount(sum(units.values()))
        if len(units) > 1 and self.resource.one_gpu:
            log.warning("%s: allocated %s split over %d GPUs, %s; the container gets each "
                        "GPU's part as a budget on that GPU alone", self.resource.name, amount,
                        len(units), shown)
        else:
            log.info("%s: allocated %s, %s", self.resource.name, amount, shown)

    def PreStartContainer(self, request, context):
        return api.PreStartContainerResponse()
