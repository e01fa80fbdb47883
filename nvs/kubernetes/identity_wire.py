"""The questions the node-identity service answers, and its answers, as they cross its socket:
one line of JSON each way ("who is container C of pod P", "pod, namespace, name, units"; and
"what do the node's containers hold of each GPU", "per GPU: memory, compute, containers").

The service (identity_server.py) holds the container runtime's and the kubelet's sockets in a
container of its own, so that the scheduler needs neither (docs/security.md); the scheduler asks
it (identity_client.py) what it would otherwise have asked them (node.py).
"""

from __future__ import annotations

import json
import re
import socket
from dataclasses import dataclass

from ..core.model.container import GpuUnits, HeldUnits, NodeIdentity
from .cgroups import ContainerRef

MAX_LINE_BYTES = 64 << 10  # a container's identity and its units on every GPU of a node
_CONTAINER_ID = re.compile(r"^[0-9a-f]{64}$")
_POD_UID = re.compile(r"^[0-9a-fA-F-]{1,64}$")
HELD_UNITS = "held_units"  # the question's name for what the node's containers hold


@dataclass(frozen=True)
class AskHeldUnits:
    """The question of what all the node's containers hold of each GPU (read_question)."""


def _line(value: dict) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"


def _object(line: bytes, what: str) -> dict:
    if len(line) > MAX_LINE_BYTES:
        raise ValueError(f"{what} is longer than {MAX_LINE_BYTES} bytes")
    try:
        value = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{what} is not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what} is not a JSON object")
    return value


def question(ref: ContainerRef) -> bytes:
    return _line({"container_id": ref.container_id, "pod_uid": ref.pod_uid,
                  "runtime": ref.runtime})


def held_question() -> bytes:
    return _line({"question": HELD_UNITS})


def read_question(line: bytes) -> ContainerRef | AskHeldUnits:
    """The container asked about, or AskHeldUnits; ValueError for anything but a container's ID
    and its pod's UID as a cgroup names them, or the held-units question."""
    value = _object(line, "the question")
    if "question" in value:
        if value["question"] != HELD_UNITS or len(value) != 1:
            raise ValueError(f"the question is not {HELD_UNITS!r} alone")
        return AskHeldUnits()
    container_id, pod_uid = value.get("container_id"), value.get("pod_uid")
    runtime = value.get("runtime", "")
    if not isinstance(container_id, str) or not _CONTAINER_ID.match(container_id):
        raise ValueError("the question names no container ID (64 hex digits)")
    if not isinstance(pod_uid, str) or not _POD_UID.match(pod_uid):
        raise ValueError("the question names no pod UID")
    if not isinstance(runtime, str) or len(runtime) > 32:
        raise ValueError("the question's runtime is not a short string")
    return ContainerRef(container_id, pod_uid, runtime)


def answer(identity: NodeIdentity | None, problem: str) -> bytes:
    if identity is None:
        return _line({"identity": None, "problem": problem})
    return _line({"identity": {
        "container_id": identity.container_id, "pod": identity.pod,
        "namespace": identity.namespace, "container": identity.container,
        "pod_uid": identity.pod_uid, "problem": identity.problem,
        "gpus": [{"gpu_uuid": gpu.gpu_uuid, "memory_units": gpu.memory_units,
                  "memory_bytes": gpu.memory_bytes, "compute_units": gpu.compute_units}
                 for gpu in identity.gpus]}, "problem": problem})


def _answer(line: bytes, key: str) -> tuple:
    """An answer's `key` (None where it says none) and its problem; ValueError for a line that
    is no answer."""
    value = _object(line, "the answer")
    problem = value.get("problem", "")
    if not isinstance(problem, str):
        raise ValueError("the answer's problem is not a string")
    return value.get(key), problem


def read_answer(line: bytes) -> tuple[NodeIdentity | None, str]:
    """What the service said, as node.NodeLookup.identify says it; ValueError for an answer
    that is not one."""
    found, problem = _answer(line, "identity")
    if found is None:
        return None, problem
    try:
        gpus = tuple(GpuUnits(str(gpu["gpu_uuid"]), _count(gpu["memory_units"]),
                              _count(gpu["memory_bytes"]), _count(gpu["compute_units"]))
                     for gpu in found["gpus"])
        identity = NodeIdentity(*(_text(found[key]) for key in (
            "container_id", "pod", "namespace", "container", "pod_uid")), gpus,
            _text(found.get("problem", "")))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"the answer's identity is incomplete ({exc!r})") from None
    return identity, problem


def held_answer(held: tuple[HeldUnits, ...] | None, problem: str) -> bytes:
    return _line({"held": None if held is None else [
        {"gpu_uuid": gpu.gpu_uuid, "memory_bytes": gpu.memory_bytes,
         "compute_units": gpu.compute_units, "containers": gpu.containers} for gpu in held],
        "problem": problem})


def read_held_answer(line: bytes) -> tuple[tuple[HeldUnits, ...] | None, str]:
    """What the service said the node's containers hold, as node.NodeLookup.held_units says
    it; ValueError for an answer that is not one."""
    held, problem = _answer(line, "held")
    if held is None:
        return None, problem
    try:
        return tuple(HeldUnits(_text(gpu["gpu_uuid"]), _count(gpu["memory_bytes"]),
                               _count(gpu["compute_units"]), _count(gpu["containers"]))
                     for gpu in held), problem
    except (KeyError, TypeError) as exc:
        raise ValueError(f"the answer's held units are incomplete ({exc!r})") from None


def _count(value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError(f"{value!r} is not a count")
    return value


def _text(value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def read_line(sock: socket.socket) -> bytes:
    """One line from `sock`, within its timeout; ValueError for a connection that closes
    before it ends, or a line past MAX_LINE_BYTES."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            raise ValueError("the connection closed before a whole line")
        data += chunk
        if len(data) > MAX_LINE_BYTES:
            raise ValueError(f"a line is longer than {MAX_LINE_BYTES} bytes")
    return data
