"""What a .proto file declares, read from its text: its package, each message's fields (name,
number, type, label) and each service's methods, for comparing with the descriptors we build.

Enough of proto3 for the kubelet's and the container runtime's API files: messages (nested
ones named `Outer.Inner`), enums (skipped), oneofs (their fields belong to the message), maps,
`repeated` and `optional`, field options in brackets, services with streaming methods.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[A-Za-z_][\w.]*|\d+|[{}()<>\[\];=,]')
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


@dataclass(frozen=True)
class ProtoField:
    number: int
    kind: str  # a scalar's name, a message's (as written), or "map<key,value>"
    label: str  # "", "repeated" or "optional"


@dataclass
class ProtoFile:
    package: str = ""
    messages: dict[str, dict[str, ProtoField]] = field(default_factory=dict)
    # service -> method -> (request, response, the request streams, the response streams)
    services: dict[str, dict[str, tuple[str, str, bool, bool]]] = field(default_factory=dict)


class _Tokens:
    def __init__(self, text: str):
        self.items = TOKEN.findall(COMMENT.sub(" ", text))
        self.at = 0

    def peek(self) -> str:
        return self.items[self.at] if self.at < len(self.items) else ""

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if not token or (expected is not None and token != expected):
            raise ValueError(f"expected {expected or 'more'} at token {self.at}, found {token!r}")
        self.at += 1
        return token

    def skip_until(self, end: str) -> None:
        while self.take() != end:
            pass

    def skip_block(self) -> None:
        """From a `{` to its `}`."""
        depth = 0
        while True:
            token = self.take()
            depth += {"{": 1, "}": -1}.get(token, 0)
            if depth == 0:
                return


def parse(path: Path) -> ProtoFile:
    tokens, proto = _Tokens(path.read_text()), ProtoFile()
    while tokens.peek():
        word = tokens.take()
        if word == "package":
            proto.package = tokens.take()
            tokens.take(";")
        elif word == "message":
            _message(tokens, tokens.take(), proto)
        elif word == "service":
            _service(tokens, tokens.take(), proto)
        elif word == "enum":
            tokens.take()
            tokens.skip_block()
        else:  # syntax, option, import
            tokens.skip_until(";")
    return proto


def _message(tokens: _Tokens, name: str, proto: ProtoFile) -> None:
    fields = proto.messages.setdefault(name, {})
    tokens.take("{")
    while tokens.peek() != "}":
        word = tokens.peek()
        if word == "message":
            tokens.take()
            _message(tokens, f"{name}.{tokens.take()}", proto)
        elif word == "enum":
            tokens.take(), tokens.take()
            tokens.skip_block()
        elif word == "oneof":
            tokens.take(), tokens.take(), tokens.take("{")
            while tokens.peek() != "}":
                _field(tokens, fields)
            tokens.take("}")
        elif word in ("option", "reserved"):
            tokens.skip_until(";")
        else:
            _field(tokens, fields)
    tokens.take("}")


def _field(tokens: _Tokens, fields: dict[str, ProtoField]) -> None:
    label = tokens.take() if tokens.peek() in ("repeated", "optional") else ""
    kind = tokens.take()
    if kind == "map":
        tokens.take("<")
        key = tokens.take()
        tokens.take(",")
        value = tokens.take()
        tokens.take(">")
        kind = f"map<{key},{value}>"
    name = tokens.take()
    tokens.take("=")
    number = int(tokens.take())
    if tokens.peek() == "[":
        tokens.skip_until("]")
    tokens.take(";")
    fields[name] = ProtoField(number, kind, label)


def _service(tokens: _Tokens, name: str, proto: ProtoFile) -> None:
    methods = proto.services.setdefault(name, {})
    tokens.take("{")
    while tokens.peek() != "}":
        if tokens.peek() == "option":
            tokens.skip_until(";")
            continue
        tokens.take("rpc")
        method = tokens.take()
        request, request_streams = _argument(tokens)
        tokens.take("returns")
        response, response_streams = _argument(tokens)
        if tokens.peek() == "{":
            tokens.skip_block()
        if tokens.peek() == ";":
            tokens.take()
        methods[method] = (request, response, request_streams, response_streams)
    tokens.take("}")


def _argument(tokens: _Tokens) -> tuple[str, bool]:
    tokens.take("(")
    streams = tokens.peek() == "stream"
    if streams:
        tokens.take()
    name = tokens.take()
    tokens.take(")")
    return name, streams
