"""Protobuf message classes made at run time from tables of fields, for the node's gRPC APIs.

The container runtime's and the kubelet's APIs are described field by field in cri_api.py and
pod_resources_api.py instead of being generated from their .proto files, so that nothing is
compiled at build time; only field numbers and types reach the wire, and they are copied from
the upstream files. Each API gets a descriptor pool of its own, away from the default pool that
another library in the process might fill with a file of the same package. protobuf is imported
only when a class is first needed: the scheduler runs without it outside Kubernetes.
"""

from __future__ import annotations

from dataclasses import dataclass

MAP = "map<string,string>"  # proto3's map: a repeated nested entry of key 1 and value 2
ONE, MANY = "optional", "repeated"


@dataclass(frozen=True)
class Field:
    name: str
    number: int
    kind: str  # "string", "bool", "int32", "uint32", "int64", "uint64", a message's name, MAP
    label: str = ONE


SCALARS = {"string": "TYPE_STRING", "bool": "TYPE_BOOL", "int32": "TYPE_INT32",
           "uint32": "TYPE_UINT32", "int64": "TYPE_INT64", "uint64": "TYPE_UINT64"}


def _entry_name(field: str) -> str:
    """protoc's name for a map field's entry type: `labels` -> `LabelsEntry`."""
    return "".join(part[:1].upper() + part[1:] for part in field.split("_")) + "Entry"


def build(file_name: str, package: str, messages: dict[str, list[Field]]) -> dict[str, type]:
    """Message name -> class, for `messages` (name -> its fields) of `package`. ImportError
    when protobuf is not installed."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FieldDescriptorProto
    labels = {ONE: proto.LABEL_OPTIONAL, MANY: proto.LABEL_REPEATED}
    file = descriptor_pb2.FileDescriptorProto(name=file_name, package=package, syntax="proto3")
    for message_name, fields in messages.items():
        message = file.message_type.add(name=message_name)
        for field in fields:
            added = message.field.add(name=field.name, number=field.number,
                                      label=labels[field.label])
            if field.kind in SCALARS:
                added.type = getattr(proto, SCALARS[field.kind])
                continue
            added.type = proto.TYPE_MESSAGE
            if field.kind == MAP:
                entry = message.nested_type.add(name=_entry_name(field.name))
                entry.options.map_entry = True
                for number, name in ((1, "key"), (2, "value")):
                    entry.field.add(name=name, number=number, type=proto.TYPE_STRING,
                                    label=proto.LABEL_OPTIONAL)
                added.label = proto.LABEL_REPEATED
                added.type_name = f".{package}.{message_name}.{entry.name}"
            else:
                added.type_name = f".{package}.{field.kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
            for name in messages}
