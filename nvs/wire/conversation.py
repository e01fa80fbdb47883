"""Which messages a connection may send, given what it has become (docs/protocol.md).

The first frame decides: REGISTER makes a client, CONTROL a control connection. Anything else is
out of order and closes the connection.
"""

from __future__ import annotations

from .. import protocol as p

CLIENT, CONTROL = "client", "control"
CLIENT_MESSAGES = (p.RequestLock, p.LockReleased, p.MemReport, p.DeviceUuid, p.Moved,
                   p.Gang, p.Ping)


def next_kind(kind: str | None, message) -> str:
    """The connection's kind after `message`; ProtocolError if the message is out of order."""
    name = message.TYPE.name
    if kind is None:
        if type(message) is p.Register:
            return CLIENT
        if type(message) is p.Control:
            return CONTROL
        raise p.ProtocolError(f"{name} cannot open a connection: the first frame must be "
                              "REGISTER or CONTROL")
    if kind == CLIENT and type(message) in CLIENT_MESSAGES:
        return kind
    if kind == CONTROL and type(message) is p.Control:
        return kind
    raise p.ProtocolError(f"{name} is out of order on a {kind} connection")
