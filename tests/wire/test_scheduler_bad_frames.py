"""Every kind of bad frame closes only its own connection, with an ERROR and a logged reason."""

import logging

import pytest
import trio
from trio_peer import Peer

from gemshare_nvs import protocol as p

PROTOCOL, VERSION = p.ErrorCode.PROTOCOL, p.ErrorCode.VERSION


def header(kind: int, length: int, magic: int = p.MAGIC, version: int = p.VERSION) -> bytes:
    return p.HEADER.pack(magic, version, kind, length, 1)


REGISTER = p.encode(p.Register(0, 0, "bad-frames"))
REGISTER_SIZE = p.Register.struct().size
NEXT_VERSION = p.VERSION + 1
STATUS = p.encode(p.Control({"op": "status"}))
DEEP = b"[" * 30_000 + b"]" * 30_000  # past the JSON parser's own recursion limit
DEEP_VALUE = b'{"op":"set","tq":' + b"[" * 200 + b"]" * 200 + b"}"  # within it, yet too deep

CASES = {
    "bad magic": (header(p.MsgType.REGISTER, REGISTER_SIZE, magic=0xDEADBEEF)
                  + bytes(REGISTER_SIZE), PROTOCOL, "bad magic"),
    "wrong version": (header(p.MsgType.REGISTER, REGISTER_SIZE, version=NEXT_VERSION)
                      + bytes(REGISTER_SIZE), VERSION,
                      f"version {NEXT_VERSION} is not supported"),
    "unknown type": (header(99, 0), PROTOCOL, "unknown message type 99"),
    "oversized": (header(p.MsgType.CONTROL, p.MAX_PAYLOAD + 1), PROTOCOL, "exceeds"),
    "fixed payload of the wrong size": (REGISTER + header(p.MsgType.REQUEST_LOCK, 4) + bytes(4),
                                        PROTOCOL, "REQUEST_LOCK payload is 4 bytes, not 8"),
    "invalid JSON": (header(p.MsgType.CONTROL, 5) + b"{nope", PROTOCOL, "not JSON"),
    "JSON that is no object": (header(p.MsgType.CONTROL, 3) + b"[1]", PROTOCOL,
                               "must be a JSON object"),
    "deeply nested JSON": (header(p.MsgType.CONTROL, len(DEEP)) + DEEP, PROTOCOL,
                           "nested more than 32 levels deep"),
    "nested JSON in a valid request": (header(p.MsgType.CONTROL, len(DEEP_VALUE)) + DEEP_VALUE,
                                       PROTOCOL, "nested more than 32 levels deep"),
    "nested JSON after a good request": (STATUS + header(p.MsgType.CONTROL, len(DEEP)) + DEEP,
                                         PROTOCOL, "nested more than 32 levels deep"),
    "request before register": (p.encode(p.RequestLock(0)), PROTOCOL,
                                "REQUEST_LOCK cannot open a connection"),
    "scheduler-only message": (p.encode(p.LockGranted(0, 0, 1)), PROTOCOL,
                               "LOCK_GRANTED cannot open a connection"),
    "second register": (REGISTER + REGISTER, PROTOCOL, "REGISTER is out of order on a client"),
    "control on a client": (REGISTER + STATUS, PROTOCOL, "CONTROL is out of order on a client"),
    "register on control": (STATUS + REGISTER, PROTOCOL, "REGISTER is out of order on a control"),
    "reply sent to the scheduler": (STATUS + p.encode(p.ControlReply({})), PROTOCOL,
                                    "CONTROL_REPLY is out of order"),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_bad_frame_gets_an_error_and_a_closed_connection(inprocess_scheduler, caplog, case):
    caplog.set_level(logging.INFO, "gemshare.scheduler")
    running = await inprocess_scheduler()
    data, code, words = CASES[case]
    bystander = await Peer.connect(running.socket)
    await bystander.register("bystander")
    bad = await Peer.connect(running.socket)
    await bad.send_raw(data)
    received = await bad.closed_after()
    errors = [m for m in received if isinstance(m, p.Error)]
    assert [(e.code, words in e.text) for e in errors] == [(code, True)], received
    assert words in caplog.text  # the reason is logged
    assert "internal error" not in caplog.text
    await bystander.send(p.RequestLock(0))  # the scheduler and its other clients carry on
    assert isinstance(await bystander.recv(), p.LockGranted)


# What each kind of connection sends before it stops inside a frame: nothing, a client's
# REGISTER, a control connection's request.
OPENINGS = {"unknown": b"", "client": REGISTER, "control": STATUS}
CUTS = {"inside a header": 9, "after a whole header": p.HEADER_SIZE, "inside a payload": 20}


@pytest.mark.parametrize("kind", list(OPENINGS))
@pytest.mark.parametrize("cut", list(CUTS))
async def test_connection_closed_inside_a_frame_is_logged_and_forgotten(inprocess_scheduler,
                                                                        caplog, kind, cut):
    caplog.set_level(logging.INFO, "gemshare.scheduler")  # a line at INFO, not only with debug
    running = await inprocess_scheduler()
    peer = await Peer.connect(running.socket)
    unfinished = p.encode(p.MemReport(0, 0, 1, 2) if kind == "client" else
                          p.Control({"op": "status"}))[:CUTS[cut]]
    await peer.send_raw(OPENINGS[kind] + unfinished)
    if kind == "client":
        assert isinstance(await peer.recv(), p.Registered)
    await peer.aclose()
    with trio.fail_after(10):
        while (await running.server.status())["connections"]:
            await trio.sleep(0.005)
    line, = [r for r in caplog.records if "closed by the peer inside a frame" in r.message]
    assert line.levelno == logging.INFO
    assert kind in line.message if kind != "unknown" else "before its first frame" in line.message
    if kind == "client":
        assert "disconnect client" in caplog.text
