"""The kubelet's device-plugin API, version v1beta1, as protobuf messages built at import.

The messages are described here field by field rather than generated from a .proto file, so
that nothing has to be compiled at build time. Names and field numbers are those of the
kubelet's `pkg/apis/deviceplugin/v1beta1/api.proto` (package `v1beta1`): only the numbers and
types reach the wire, and a real kubelet decodes what we send by them, so they must never drift.
The descriptors live in a pool of their own, away from the default one that other libraries in
the same process might fill with a file of the same package.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

PACKAGE = "v1beta1"
REGISTRATION_SERVICE = f"{PACKAGE}.Registration"
DEVICE_PLUGIN_SERVICE = f"{PACKAGE}.DevicePlugin"

_F = descriptor_pb2.FieldDescriptorProto
STRING, BOOL, INT32, INT64, MESSAGE = (_F.TYPE_STRING, _F.TYPE_BOOL, _F.TYPE_INT32,
                                       _F.TYPE_INT64, _F.TYPE_MESSAGE)
ONE, MANY = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

# message name -> [(field name, number, type, label, message type or None)]; a message type
# "map<string,string>" becomes proto3's map: a repeated nested entry of key 1 and value 2.
MAP = "map<string,string>"
MESSAGES: dict[str, list[tuple]] = {
    "DevicePluginOptions": [("pre_start_required", 1, BOOL, ONE, None),
                            ("get_preferred_allocation_available", 2, BOOL, ONE, None)],
    "RegisterRequest": [("version", 1, STRING, ONE, None),
                        ("endpoint", 2, STRING, ONE, None),
                        ("resource_name", 3, STRING, ONE, None),
                        ("options", 4, MESSAGE, ONE, "DevicePluginOptions")],
    "Empty": [],
    "ListAndWatchResponse": [("devices", 1, MESSAGE, MANY, "Device")],
    "TopologyInfo": [("nodes", 1, MESSAGE, MANY, "NUMANode")],
    "NUMANode": [("ID", 1, INT64, ONE, None)],
    "Device": [("ID", 1, STRING, ONE, None),
               ("health", 2, STRING, ONE, None),
               ("topology", 3, MESSAGE, ONE, "TopologyInfo")],
    "PreStartContainerRequest": [("devices_ids", 1, STRING, MANY, None)],
    "PreStartContainerResponse": [],
    "PreferredAllocationRequest": [
        ("container_requests", 1, MESSAGE, MANY, "ContainerPreferredAllocationRequest")],
    "ContainerPreferredAllocationRequest": [("available_deviceIDs", 1, STRING, MANY, None),
                                            ("must_include_deviceIDs", 2, STRING, MANY, None),
                                            ("allocation_size", 3, INT32, ONE, None)],
    "PreferredAllocationResponse": [
        ("container_responses", 1, MESSAGE, MANY, "ContainerPreferredAllocationResponse")],
    "ContainerPreferredAllocationResponse": [("deviceIDs", 1, STRING, MANY, None)],
    "AllocateRequest": [("container_requests", 1, MESSAGE, MANY, "ContainerAllocateRequest")],
    "ContainerAllocateRequest": [("devices_ids", 1, STRING, MANY, None)],
    "CDIDevice": [("name", 1, STRING, ONE, None)],
    "AllocateResponse": [
        ("container_responses", 1, MESSAGE, MANY, "ContainerAllocateResponse")],
    "ContainerAllocateResponse": [("envs", 1, MESSAGE, MANY, MAP),
                                  ("mounts", 2, MESSAGE, MANY, "Mount"),
                                  ("devices", 3, MESSAGE, MANY, "DeviceSpec"),
                                  ("annotations", 4, MESSAGE, MANY, MAP),
                                  ("cdi_devices", 5, MESSAGE, MANY, "CDIDevice")],
    "Mount": [("container_path", 1, STRING, ONE, None),
              ("host_path", 2, STRING, ONE, None),
              ("read_only", 3, BOOL, ONE, None)],
    "DeviceSpec": [("container_path", 1, STRING, ONE, None),
                   ("host_path", 2, STRING, ONE, None),
                   ("permissions", 3, STRING, ONE, None)],
}

# service -> [(method, request, response, whether the server streams its answers)]
SERVICES: dict[str, list[tuple[str, str, str, bool]]] = {
    "Registration": [("Register", "RegisterRequest", "Empty", False)],
    "DevicePlugin": [
        ("GetDevicePluginOptions", "Empty", "DevicePluginOptions", False),
        ("ListAndWatch", "Empty", "ListAndWatchResponse", True),
        ("GetPreferredAllocation", "PreferredAllocationRequest",
         "PreferredAllocationResponse", False),
        ("Allocate", "AllocateRequest", "AllocateResponse", False),
        ("PreStartContainer", "PreStartContainerRequest", "PreStartContainerResponse", False),
    ],
}


def _map_entry_name(field: str) -> str:
    """protoc's name for a map field's entry type: `cdi_devices` -> `CdiDevicesEntry`."""
    return "".join(part[:1].upper() + part[1:] for part in field.split("_")) + "Entry"


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(name="gemshare/deviceplugin/v1beta1.proto",
                                              package=PACKAGE, syntax="proto3")
    for message_name, fields in MESSAGES.items():
        message = file.message_type.add(name=message_name)
        for name, number, kind, label, type_name in fields:
            field = message.field.add(name=name, number=number, type=kind, label=label)
            if type_name == MAP:
                entry = message.nested_type.add(name=_map_entry_name(name))
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, type=STRING, label=ONE)
                entry.field.add(name="value", number=2, type=STRING, label=ONE)
                field.type_name = f".{PACKAGE}.{message_name}.{entry.name}"
            elif type_name is not None:
                field.type_name = f".{PACKAGE}.{type_name}"
    for service_name, methods in SERVICES.items():
        service = file.service.add(name=service_name)
        for method, request, response, streams in methods:
            service.method.add(name=method, input_type=f".{PACKAGE}.{request}",
                               output_type=f".{PACKAGE}.{response}", server_streaming=streams)
    return file


_pool = descriptor_pool.DescriptorPool()
_pool.Add(_file_descriptor())


def _message_class(name: str):
    return message_factory.GetMessageClass(_pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))


DevicePluginOptions = _message_class("DevicePluginOptions")
RegisterRequest = _message_class("RegisterRequest")
Empty = _message_class("Empty")
ListAndWatchResponse = _message_class("ListAndWatchResponse")
TopologyInfo = _message_class("TopologyInfo")
NUMANode = _message_class("NUMANode")
Device = _message_class("Device")
PreStartContainerRequest = _message_class("PreStartContainerRequest")
PreStartContainerResponse = _message_class("PreStartContainerResponse")
PreferredAllocationRequest = _message_class("PreferredAllocationRequest")
ContainerPreferredAllocationRequest = _message_class("ContainerPreferredAllocationRequest")
PreferredAllocationResponse = _message_class("PreferredAllocationResponse")
ContainerPreferredAllocationResponse = _message_class("ContainerPreferredAllocationResponse")
AllocateRequest = _message_class("AllocateRequest")
ContainerAllocateRequest = _message_class("ContainerAllocateRequest")
CDIDevice = _message_class("CDIDevice")
AllocateResponse = _message_class("AllocateResponse")
ContainerAllocateResponse = _message_class("ContainerAllocateResponse")
Mount = _message_class("Mount")
DeviceSpec = _message_class("DeviceSpec")


def method_path(service: str, method: str) -> str:
    """The HTTP/2 path a gRPC call to `method` of `service` (e.g. "DevicePlugin") travels on."""
    return f"/{PACKAGE}.{service}/{method}"


def message_types(service: str, method: str) -> tuple[type, type, bool]:
    """The request class, the response class and whether the answer is a stream."""
    for name, request, response, streams in SERVICES[service]:
        if name == method:
            return _message_class(request), _message_class(response), streams
    raise KeyError(f"{service} has no method {method}")
