"""The v1beta1 messages carry the kubelet's field numbers and types, so a real kubelet reads them.

The numbers below are copied from the kubelet's
staging/src/k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto.
"""

from __future__ import annotations

import pytest

from gemshare_plugin import api

KUBELET_FIELDS = {
    "DevicePluginOptions": {"pre_start_required": 1, "get_preferred_allocation_available": 2},
    "RegisterRequest": {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4},
    "Empty": {},
    "ListAndWatchResponse": {"devices": 1},
    "TopologyInfo": {"nodes": 1},
    "NUMANode": {"ID": 1},
    "Device": {"ID": 1, "health": 2, "topology": 3},
    "PreStartContainerRequest": {"devices_ids": 1},
    "PreStartContainerResponse": {},
    "PreferredAllocationRequest": {"container_requests": 1},
    "ContainerPreferredAllocationRequest": {"available_deviceIDs": 1,
                                            "must_include_deviceIDs": 2, "allocation_size": 3},
    "PreferredAllocationResponse": {"container_responses": 1},
    "ContainerPreferredAllocationResponse": {"deviceIDs": 1},
    "AllocateRequest": {"container_requests": 1},
    "ContainerAllocateRequest": {"devices_ids": 1},
    "CDIDevice": {"name": 1},
    "AllocateResponse": {"container_responses": 1},
    "ContainerAllocateResponse": {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4,
                                  "cdi_devices": 5},
    "Mount": {"container_path": 1, "host_path": 2, "read_only": 3},
    "DeviceSpec": {"container_path": 1, "host_path": 2, "permissions": 3},
}


@pytest.mark.parametrize("name", sorted(KUBELET_FIELDS))
def test_field_numbers_are_the_kubelets(name):
    descriptor = getattr(api, name).DESCRIPTOR
    assert descriptor.full_name == f"v1beta1.{name}"
    assert {field.name: field.number for field in descriptor.fields} == KUBELET_FIELDS[name]


def test_envs_and_annotations_are_string_maps():
    response = api.ContainerAllocateResponse(envs={"A": "1"}, annotations={"b": "2"})
    decoded = api.ContainerAllocateResponse.FromString(response.SerializeToString())
    assert dict(decoded.envs) == {"A": "1"} and dict(decoded.annotations) == {"b": "2"}


def test_bytes_on_the_wire_are_those_protoc_would_write():
    # Field 1 (ID, length-delimited) "a", field 2 (health) "Healthy".
    assert api.Device(ID="a", health=api.HEALTHY).SerializeToString() == \
        b"\x0a\x01a\x12\x07Healthy"
    # Mount: container_path 1, host_path 2, read_only 3 (varint).
    assert api.Mount(container_path="/c", host_path="/h", read_only=True).SerializeToString() \
        == b"\x0a\x02/c\x12\x02/h\x18\x01"
    # A map entry is a nested message of key 1 and value 2, in field 1 (envs).
    assert api.ContainerAllocateResponse(envs={"K": "V"}).SerializeToString() == \
        b"\x0a\x06\x0a\x01K\x12\x01V"


def test_services_and_methods_have_the_kubelets_paths():
    assert api.method_path("Registration", "Register") == "/v1beta1.Registration/Register"
    assert api.method_path("DevicePlugin", "ListAndWatch") == "/v1beta1.DevicePlugin/ListAndWatch"
    assert [method for method, *_ in api.SERVICES["DevicePlugin"]] == [
        "GetDevicePluginOptions", "ListAndWatch", "GetPreferredAllocation", "Allocate",
        "PreStartContainer"]
    assert api.message_types("DevicePlugin", "ListAndWatch")[2] is True
    assert api.message_types("DevicePlugin", "Allocate")[:2] == (api.AllocateRequest,
                                                                 api.AllocateResponse)
