"""Text frames written straight to a WebSocket connection: exactly what the ``websockets`` library reads back, for
every payload length class, from whole SSE events or from payloads; nothing written to a connection that is gone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from uvicorn.protocols.utils import ClientDisconnected
from websockets.frames import Frame, Opcode
from websockets.protocol import CLOSING, OPEN
from websockets.streams import StreamReader

from gateway.http.sse_response import event_frame
from gateway.http.websocket_frames import FrameWriter, frame_writer, framed, framed_events


class _Connection:
    def __init__(self) -> None:
        self.state = OPEN
        self.extensions: list[Any] = []


class _Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)


class _Protocol:
    """The attributes of uvicorn's protocol the writer reads."""

    def __init__(self) -> None:
        self.writable = asyncio.Event()
        self.writable.set()
        self.disconnected = False
        self.close_sent = False
        self.conn = _Connection()
        self.transport = _Transport()


def _frames(data: bytes) -> list[Frame]:
    """The frames in ``data``, read by the library's own parser (a generator: with all the data there, it
    returns at once)."""
    reader = StreamReader()
    reader.feed_data(data)
    frames = []
    while reader.buffer:
        try:
            next(Frame.parse(reader.read_exact, mask=False))
        except StopIteration as done:
            frames.append(done.value)
    return frames


PAYLOADS = [b"", b"{}", b'{"x":"' + b"a" * 119 + b'"}', b'{"x":"' + b"b" * 300 + b'"}',
            b'{"x":"' + b"c" * 70_000 + b'"}', '{"x":"é ✓"}'.encode()]


@pytest.mark.parametrize("whole_events", [False, True], ids=["payloads", "sse-events"])
def test_each_payload_is_one_final_unmasked_text_frame(whole_events: bool) -> None:
    protocol = _Protocol()
    writer = FrameWriter(protocol)  # type: ignore[arg-type]
    if whole_events:
        body = b"".join(event_frame(f"e{n}", payload) for n, payload in enumerate(PAYLOADS) if payload)
        data = framed_events(body)
        assert data is not None
        assert writer.write_now(data) is True
        wanted = [payload for payload in PAYLOADS if payload]
    else:
        asyncio.run(writer.write(framed(PAYLOADS)))
        wanted = PAYLOADS
    assert len(protocol.transport.written) == 1  # one write for them all
    frames = _frames(protocol.transport.written[0])
    assert [frame.data for frame in frames] == wanted
    assert all(frame.opcode is Opcode.TEXT and frame.fin for frame in frames)


def test_what_is_not_whole_events_is_left_to_the_caller() -> None:
    for partial in (b"event: a\ndata: {", b'"x"}\n\n', b"data: {}\n\n", b""):
        assert framed_events(partial) is None


def test_a_full_transport_is_waited_for() -> None:
    protocol = _Protocol()
    protocol.writable.clear()
    writer = FrameWriter(protocol)  # type: ignore[arg-type]
    assert writer.write_now(b"\x81\x00") is False  # the caller awaits ``write`` instead
    assert protocol.transport.written == []

    async def resumed() -> None:
        task = asyncio.ensure_future(writer.write(b"\x81\x00"))
        await asyncio.sleep(0)
        assert protocol.transport.written == []
        protocol.writable.set()
        await task

    asyncio.run(resumed())
    assert protocol.transport.written == [b"\x81\x00"]


@pytest.mark.parametrize("gone", ["disconnected", "close_sent", "closing"])
def test_a_connection_that_is_gone_or_closing_gets_nothing(gone: str) -> None:
    protocol = _Protocol()
    if gone == "closing":
        protocol.conn.state = CLOSING
    else:
        setattr(protocol, gone, True)
    with pytest.raises(ClientDisconnected):
        asyncio.run(FrameWriter(protocol).write(framed([b"{}"])))  # type: ignore[arg-type]
    with pytest.raises(ClientDisconnected):
        FrameWriter(protocol).write_now(framed([b"{}"]))  # type: ignore[arg-type]
    assert protocol.transport.written == []


def test_only_the_gateways_own_protocol_is_written_to_directly() -> None:
    async def send(message: Any) -> None:
        return None

    assert frame_writer(send) is None
    assert frame_writer(_Protocol().transport.write) is None
