"""Round trips and refusals of the Python frame codec."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gemshare_nvs import protocol as p

u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
text = st.text(max_size=80)

messages = st.one_of(
    st.builds(p.Register, device=u32, flags=u32, process_name=text, pod_namespace=text,
              pod_name=st.text(max_size=300), label=text),
    st.builds(p.Registered, client_id=u64, mode=u32, tq_seconds=u32),
    st.builds(p.RequestLock, device=u32),
    st.builds(p.LockGranted, device=u32, flags=u32, quantum_ms=u64),
    st.builds(p.DropLock, device=u32, evict_bytes=u64),
    st.builds(p.Evict, device=u32, bytes=u64),
    st.builds(p.Moved, device=u32, flags=u32, bytes=u64, elapsed_us=u64),
    st.builds(p.IdleHint, device=u32, idle_release_ms=u32),
    st.builds(p.Limits, memory_limit=u64),
    st.builds(p.LockReleased, device=u32, reason=u32, idle_us=u64),
    st.builds(p.LockRevoked, device=u32),
    st.builds(p.SchedMode, mode=u32, tq_seconds=u32),
    st.builds(p.MemReport, device=u32, allocated_bytes=u64, device_total_bytes=u64),
    st.builds(p.Control, body=st.dictionaries(st.text(max_size=10), st.integers(), max_size=5)),
    st.builds(p.ControlReply, body=st.dictionaries(st.text(max_size=10), text, max_size=5)),
    st.builds(p.Error, code=u32, text=st.text(max_size=200)),
)


def truncated_like_the_wire(message):
    """Text fields are cut to their size on the wire; compare against that."""
    if not isinstance(message, p.Fixed):
        return message
    fields = {}
    for name, code in message.LAYOUT:
        value = getattr(message, name)
        if code.endswith("s"):
            raw = value.encode()[: int(code[:-1])].decode("utf-8", errors="ignore")
            value = raw.split("\0", 1)[0]
        fields[name] = value
    return type(message)(**fields)


@given(st.lists(messages, max_size=6), st.integers(1, 64))
def test_round_trip_through_any_chunking(batch, chunk):
    stream = b"".join(p.encode(m, seq=i) for i, m in enumerate(batch))
    decoder = p.FrameDecoder()
    out = []
    for start in range(0, len(stream), chunk):
        decoder.feed(stream[start:start + chunk])
        while (item := decoder.next()) is not None:
            out.append(item)
    assert out == [(truncated_like_the_wire(m), i) for i, m in enumerate(batch)]
    assert decoder.buffered == 0


def frame(kind, payload, magic=p.MAGIC, version=p.VERSION, length=None):
    size = len(payload) if length is None else length
    return p.HEADER.pack(magic, version, kind, size, 0) + payload


@pytest.mark.parametrize("raw, fragment, code", [
    (frame(p.MsgType.REQUEST_LOCK, bytes(8), magic=0xDEADBEEF), "bad magic", p.ErrorCode.PROTOCOL),
    (frame(p.MsgType.REQUEST_LOCK, bytes(8), version=p.VERSION + 1), f"version {p.VERSION + 1}",
     p.ErrorCode.VERSION),
    (frame(99, b""), "unknown message type 99", p.ErrorCode.PROTOCOL),
    (frame(p.MsgType.CONTROL, b"", length=p.MAX_PAYLOAD + 1), "exceeds", p.ErrorCode.PROTOCOL),
    (frame(p.MsgType.REQUEST_LOCK, bytes(7)), "not 8", p.ErrorCode.PROTOCOL),
    (frame(p.MsgType.CONTROL, b"{nope"), "not JSON", p.ErrorCode.PROTOCOL),
    (frame(p.MsgType.CONTROL, b"[1, 2]"), "JSON object", p.ErrorCode.PROTOCOL),
    (frame(p.MsgType.ERROR, b"\1"), "out of range", p.ErrorCode.PROTOCOL),
])
def test_bad_frames_are_refused_with_a_reason(raw, fragment, code):
    decoder = p.FrameDecoder()
    decoder.feed(raw)
    with pytest.raises(p.ProtocolError, match=fragment) as info:
        decoder.next()
    assert info.value.code == code


def test_oversized_frame_is_refused_from_its_header_alone():
    decoder = p.FrameDecoder(max_payload=4096)
    decoder.feed(struct.pack("<IHHII", p.MAGIC, p.VERSION, p.MsgType.CONTROL, 5000, 0))
    with pytest.raises(p.ProtocolError, match="4096"):
        decoder.next()


def test_text_fields_are_cut_on_character_boundaries():
    long_name = "é" * 40  # 80 bytes of UTF-8 into a 64-byte field
    decoder = p.FrameDecoder()
    decoder.feed(p.encode(p.Register(process_name=long_name)))
    message, _ = decoder.next()
    assert message.process_name == "é" * 32


def test_version_8_layouts_are_the_documented_ones():
    assert p.VERSION == 8
    assert (p.Register.offsets()["label"], p.Register.struct().size) == (392, 456)
    assert (p.MsgType.LIMITS, p.Limits.struct().size) == (17, 16)
    assert p.Limits(5 << 30).payload() == (5 << 30).to_bytes(8, "little") + bytes(8)
    assert (p.MsgType.GANG, p.Gang.struct().size, p.Gang.offsets()["name"]) == (18, 144, 16)
    gang = p.Gang(2, 4, 1, 0, "torchelastic:job-7")
    assert p.Gang.parse(gang.payload()) == gang
    assert (p.MsgType.PING, p.MsgType.PONG, p.Ping.struct().size) == (19, 20, 8)
    decoder = p.FrameDecoder()
    decoder.feed(p.encode(p.Ping(7)) + p.encode(p.Pong(7)))
    assert [decoder.next()[0], decoder.next()[0]] == [p.Ping(7), p.Pong(7)]
    assert (p.MsgType.MPS, p.Mps.struct().size, p.Mps.offsets()["pipe_directory"]) == (21, 264, 8)
    mps = p.Mps(30, p.MpsPriority.LOW, "/run/gemshare/mps/pipe")
    assert p.Mps.parse(mps.payload()) == mps
    # client_priority sits where a reserved zero was: the layout, and the version, stayed.
    assert p.Mps.offsets()["client_priority"] == 4
    assert mps.payload()[:8] == (30).to_bytes(4, "little") + (1).to_bytes(4, "little")
    assert (p.REG_UNIFIED_MEMORY, p.REG_NO_MPS, p.REG_VIEW_ONLY) == (1, 2, 4)
    # 8: an early release says how long the device had been idle; LIMITS the budget's others.
    released = p.LockReleased(1, p.ReleaseReason.IDLE, 1_250_000)
    assert (p.LockReleased.struct().size, p.LockReleased.offsets()["idle_us"]) == (16, 8)
    assert p.LockReleased.parse(released.payload()) == released
    assert p.Limits(5 << 30, 3 << 30).payload()[8:] == (3 << 30).to_bytes(8, "little")


def test_mode_labels():
    assert p.Mode.from_label(" Auto ") is p.Mode.AUTO
    assert p.Mode.ON.label == "on"
    with pytest.raises(ValueError, match="on, off or auto"):
        p.Mode.from_label("sometimes")
