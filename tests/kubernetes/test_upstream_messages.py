"""Every gRPC message we build for a node API matches the upstream .proto file, field by field:
its name, number, type and label (repeated, map, proto3 optional), and every method's path and
message types. A field moved upstream (or here) fails this test, as a real kubelet or runtime
would misread it.

The DRA, plugin-registration and device-plugin messages must carry every upstream field (we
answer with them); for pod-resources and CRI, where we only read a few fields, each field we
declare must be upstream's, and the ones we leave out are skipped on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from proto_file import ProtoField, parse

from gemshare_dra import kubelet_api, registration_api
from gemshare_nvs.kubernetes import cri_api, pod_resources_api
from gemshare_nvs.kubernetes.proto_messages import build
from gemshare_plugin import api as device_plugin_api

UPSTREAM = Path(__file__).parent / "upstream"
_T = descriptor_pb2.FieldDescriptorProto


@dataclass(frozen=True)
class Api:
    file: str
    package: str
    classes: dict  # message name -> class
    complete: bool  # every upstream field must be ours too
    methods: dict  # "/package.Service/Method" -> (request, response, the response streams)


def _dra(version: str) -> Api:
    return Api(f"dra_{version}.proto", kubelet_api.package(version),
               kubelet_api.messages(version), True,
               {kubelet_api.method_path(version, method): (request, response, False)
                for method, (request, response) in kubelet_api.METHODS.items()})


def _device_plugin() -> Api:
    classes = {name: getattr(device_plugin_api, name) for name in device_plugin_api.MESSAGES}
    methods = {device_plugin_api.method_path(service, method): (request, response, streams)
               for service, listed in device_plugin_api.SERVICES.items()
               for method, request, response, streams in listed}
    return Api("deviceplugin_v1beta1.proto", device_plugin_api.PACKAGE, classes, True, methods)


APIS = {
    "dra v1": lambda: _dra("v1"),
    "dra v1beta1": lambda: _dra("v1beta1"),
    "plugin registration v1": lambda: Api(
        "pluginregistration_v1.proto", registration_api.PACKAGE, registration_api.messages(),
        True, {registration_api.method_path(method): (request, response, False)
               for method, (request, response) in registration_api.METHODS.items()}),
    "pod-resources v1": lambda: Api(
        "podresources_v1.proto", pod_resources_api.PACKAGE, pod_resources_api.messages(), False,
        {pod_resources_api.LIST: ("ListPodResourcesRequest", "ListPodResourcesResponse", False),
         pod_resources_api.GET: ("GetPodResourcesRequest", "GetPodResourcesResponse", False)}),
    "cri runtime.v1": lambda: Api(
        "runtime_v1.proto", cri_api.PACKAGE, cri_api.messages(), False,
        {cri_api.CONTAINER_STATUS: ("ContainerStatusRequest", "ContainerStatusResponse", False)}),
    "device plugin v1beta1": _device_plugin,
}

SCALAR_NAMES = {getattr(_T, f"TYPE_{name.upper()}"): name
                for name in ("string", "bool", "int32", "uint32", "int64", "uint64", "bytes",
                             "double", "float")}


def _kind(field, message, package: str) -> str:
    if field.type != _T.TYPE_MESSAGE:
        return SCALAR_NAMES[field.type]
    name = field.type_name.removeprefix(f".{package}.")
    return name.removeprefix(f"{message.name}.")


def our_fields(cls, package: str) -> dict[str, ProtoField]:
    """The fields of a built message class, in the terms of proto_file.ProtoField."""
    message = descriptor_pb2.DescriptorProto()
    cls.DESCRIPTOR.CopyToProto(message)
    entries = {entry.name: entry for entry in message.nested_type if entry.options.map_entry}
    fields = {}
    for field in message.field:
        entry = entries.get(field.type_name.rsplit(".", 1)[-1])
        if entry is not None:
            key, value = (_kind(part, entry, package) for part in entry.field)
            fields[field.name] = ProtoField(field.number, f"map<{key},{value}>", "")
            continue
        label = "repeated" if field.label == _T.LABEL_REPEATED else \
            "optional" if field.proto3_optional else ""
        fields[field.name] = ProtoField(field.number, _kind(field, message, package), label)
    return fields


def drift(api: Api, upstream) -> list[str]:
    """Every way `api` differs from the upstream file, one line each; [] when none."""
    problems = []
    if upstream.package != api.package:
        problems.append(f"package {api.package!r}, upstream {upstream.package!r}")
    for name, cls in api.classes.items():
        theirs = upstream.messages.get(name)
        if theirs is None:
            problems.append(f"{name}: no such message upstream")
            continue
        ours = our_fields(cls, api.package)
        for field, declared in ours.items():
            if field not in theirs:
                problems.append(f"{name}.{field}: no such field upstream")
            elif declared != theirs[field]:
                problems.append(f"{name}.{field}: ours {declared}, upstream {theirs[field]}")
        if api.complete:
            problems += [f"{name}.{field}: upstream has it, we do not"
                         for field in theirs if field not in ours]
    for path, (request, response, streams) in api.methods.items():
        service_path, method = path.strip("/").split("/")
        service = service_path.removeprefix(f"{upstream.package}.")
        upstream_method = upstream.services.get(service, {}).get(method)
        if upstream_method is None:
            problems.append(f"{path}: no such method upstream")
        elif upstream_method != (request, response, False, streams):
            problems.append(f"{path}: ours {(request, response, streams)}, "
                            f"upstream {upstream_method}")
    return problems


@pytest.mark.parametrize("name", sorted(APIS))
def test_messages_are_upstreams_field_by_field(name):
    api = APIS[name]()
    assert drift(api, parse(UPSTREAM / api.file)) == []


def test_the_check_sees_a_field_moved():
    # What the issue found went unseen: CRI's labels moved from 12 to 11, annotations 13 to 14.
    moved = {message: [replace(field, number={"labels": 11, "annotations": 14}.get(
        field.name, field.number)) if message == "ContainerStatus" else field
        for field in fields] for message, fields in cri_api.MESSAGES.items()}
    api = replace(APIS["cri runtime.v1"](),
                  classes=build("gemshare/test/moved.proto", cri_api.PACKAGE, moved))
    problems = drift(api, parse(UPSTREAM / api.file))
    assert [line.split(":")[0] for line in problems] == ["ContainerStatus.labels",
                                                         "ContainerStatus.annotations"]


def test_the_check_sees_a_type_or_a_label_changed_and_a_field_missing():
    messages = dict(kubelet_api.MESSAGES["v1"])
    messages["Claim"] = [replace(field, kind="bytes") if field.name == "uid" else field
                         for field in messages["Claim"] if field.name != "name"]
    messages["Device"] = [replace(field, label="optional") if field.name == "share_id" else field
                          for field in messages["Device"]]
    api = replace(APIS["dra v1"](), classes=build("gemshare/test/changed.proto",
                                                  kubelet_api.package("v1"), messages))
    assert sorted(line.split(":")[0] for line in drift(api, parse(UPSTREAM / api.file))) == \
        ["Claim.name", "Claim.uid", "Device.share_id"]
