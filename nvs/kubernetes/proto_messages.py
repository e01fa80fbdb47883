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
# ONE: a plain proto3 field; MANY: repeated; PRESENT: proto3's `optional`, whose presence is kept
# (a synthetic one-field oneof, as protoc makes it).
ONE, MANY, PRESENT = "optional", "repeated", "present"


def map_of(value: str) -> str:
    """The kind of a map from strings to `value` (a scalar's or a message's name)."""
    return f"map<string,{value}>"


@dataclass(frozen=True)
class Field:
    name: str
    number: int
    kind: str  # "string", "bool", "int32", "uint32", "int64", "uint64", a message's name, or
    # map_of(one of those): MAP is map_of("string")
    label: str = ONE


SCALARS = {"string": "TYPE_STRING", "bool": "TYPE_BOOL", "int32": "TYPE_INT32",
           "uint32": "TYPE_UINT32", "int64": "TYPE_INT64", "uint64": "TYPE_UINT64",
           "bytes": "TYPE_BYTES"}


def _entry_name(field: str) -> str:
    """protoc's name for a map field's entry type: `labels` -> `LabelsEntry`."""
    return "".join(part[:1].upper() + part[1:] for part in field.split("_")) + "Entry"


def _map_value(kind: str) -> str | None:
    """The value kind of a map kind, None for any other kind."""
    if kind.startswith("map<string,") and kind.endswith(">"):
        return kind[len("map<string,"):-1]
    return None


def _set_kind(field, kind: str, package: str, proto) -> None:
    if kind in SCALARS:
        field.type = getattr(proto, SCALARS[kind])
    else:
        field.type = proto.TYPE_MESSAGE
        field.type_name = f".{package}.{kind}"


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
                                      label=labels[MANY if field.label == MANY else ONE])
            value = _map_value(field.kind)
            if value is None:
                _set_kind(added, field.kind, package, proto)
            else:
                entry = message.nested_type.add(name=_entry_name(field.name))
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, type=proto.TYPE_STRING,
                                label=proto.LABEL_OPTIONAL)
                _set_kind(entry.field.add(name="value", number=2, label=proto.LABEL_OPTIONAL),
                          value, package, proto)
                added.label = proto.LABEL_REPEATED
                added.type = proto.TYPE_MESSAGE
                added.type_name = f".{package}.{message_name}.{entry.name}"
            if field.label == PRESENT:
                added.proto3_optional = True
                added.oneof_index = len(message.oneof_decl)
                message.oneof_decl.add(name=f"_{field.name}")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
            for name in messages}
