"""Text frames written straight to a WebSocket connection, several per write.

Why: a Responses turn sends some thirty events, and each ASGI ``websocket.send`` costs uvicorn's
``send`` coroutine, an encode of the text, the ``websockets`` library's frame object and its
serialisation and a write system call: about 8k instructions per event, which made a turn over a
socket dearer than the same response over HTTP (bench/README.md). The events of one upstream read
are written here in one write instead, each as the unmasked, unfragmented text frame the library
would have made (RFC 6455 section 5.2; a server never masks), from bytes that are UTF-8 already
(the gateway's own JSON).

Only where that is exactly what the library would send: the gateway's own protocol
(``websocket_server.WebSocketServerProtocol``), its connection open, and no extension negotiated
(permessage-deflate must compress every frame: ``websocket.compression`` then leaves the writing
to ASGI). Frames are written in the order they are made, as the library's own writes are (one
thread, each written at once), and the writer waits while the transport's buffer is full, as
uvicorn's ``send`` does.

The hot path (:func:`framed_events` then :meth:`FrameWriter.write_now`) is plain calls, no
coroutine: an upstream read's events are split, measured and framed by ``map`` in C, and written
at once when the transport takes them (a coroutine per write, nested three deep, cost more than
the framing).
"""

from __future__ import annotations

import itertools
import operator
import struct
from collections.abc import Callable, Iterator
from typing import Any

from uvicorn.protocols.utils import ClientDisconnected
from websockets.protocol import OPEN

from gateway.http.websocket_server import WebSocketServerProtocol

#: the head of a final text frame of each payload length below 126 (the length in the second byte)
_SHORT = [bytes((0x81, length)) for length in range(126)]
#: the heads of longer ones: a 16-bit length (126), a 64-bit one (127)
_MEDIUM = struct.Struct("!BBH").pack
_LONG = struct.Struct("!BBQ").pack
#: how ``http/sse_response.event_frame`` writes an event: ``event: NAME\\ndata: DATA\\n\\n`` (DATA is JSON, which
#: holds no raw newline); a body of whole events is cut between them and each part after its ``data:``
_FIRST = b"event: "
_BETWEEN = b"\n\nevent: "
_DATA = b"\ndata: "
_END = b"\n\n"
_AFTER = operator.itemgetter(2)


def _head(length: int) -> bytes:
    return _SHORT[length] if length < 126 else _MEDIUM(0x81, 126, length) if length < 65536 else \
        _LONG(0x81, 127, length)


class _Heads(dict[int, bytes]):
    """Frame heads by payload length, made once per length below 64 KiB (at most 64 Ki entries, a few MB):
    looked up by ``map`` in C, so framing many events runs no Python code per event."""

    def __missing__(self, length: int) -> bytes:
        head = _head(length)
        if length < 65536:
            self[length] = head
        return head


_HEADS = _Heads()
#: a final text frame's head by payload length: ``HEADS[len(payload)] + payload`` is the frame
HEADS = _HEADS
#: the media type of an ASGI body that is WebSocket frames already (a Responses turn framed by its renderer,
#: responses/events.py): never sent on the wire, it tells the connection to write the body as it is
FRAMES_TYPE = b"application/x-loopgate-websocket-frames"


def text_frame(payload: bytes) -> bytes:
    """``payload`` (UTF-8 JSON) as one final text frame."""
    return _HEADS[len(payload)] + payload


def fragments(pieces: Iterator[bytes]) -> Iterator[bytes]:
    """One text message written in pieces (a large event: responses/spliced.py), each piece a frame of its own:
    the first a text frame, the others continuations, the last one final (RFC 6455 section 5.4). Two pieces are
    held at a time: the last is known when the pieces end."""
    opcode = 0x01
    held = next(pieces, b"")
    for piece in pieces:
        yield _fragment_head(opcode, len(held)) + held
        opcode = 0x00
        held = piece
    yield _fragment_head(0x80 | opcode, len(held)) + held


def _fragment_head(first: int, length: int) -> bytes:
    return bytes((first, length)) if length < 126 else _MEDIUM(first, 126, length) if length < 65536 else \
        _LONG(first, 127, length)


def framed(payloads: list[bytes]) -> bytes:
    """The payloads as final text frames, joined: each after its head (``_HEADS``), laid out by slice assignment."""
    parts = payloads * 2
    parts[::2] = map(_HEADS.__getitem__, map(len, payloads))
    parts[1::2] = payloads
    return b"".join(parts)


def framed_events(body: bytes) -> bytes | None:
    """Whole Server-Sent Events (as ``http/sse_response`` writes them) as one text frame each, holding the event's
    data; None when ``body`` is not whole events (or is empty)."""
    if not body.endswith(_END) or not body.startswith(_FIRST):
        return None
    # The cuts are found by a skipping search for a nine-byte needle, not a scan of every byte: the
    # events carry the whole Response (its created, its terminal event), most of a stream's bytes.
    payloads = list(map(_AFTER, map(bytes.partition, body.split(_BETWEEN), itertools.repeat(_DATA))))
    payloads[-1] = payloads[-1][:-2]  # the last event's data, without the blank line that ends the body
    parts = payloads * 2  # ``framed``, inlined: this runs for every upstream read of a turn
    parts[::2] = map(_HEADS.__getitem__, map(len, payloads))
    parts[1::2] = payloads
    return b"".join(parts)


class FrameWriter:
    """Writes frames to one connection; see the module docstring. Made by :func:`frame_writer`."""

    __slots__ = ("_protocol",)

    def __init__(self, protocol: WebSocketServerProtocol) -> None:
        self._protocol = protocol

    def when_lost(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the event loop, at once) when the connection is lost."""
        self._protocol.on_lost = callback

    def write_now(self, data: bytes) -> bool:
        """Write ``data`` (whole frames) if the transport takes it now; False when its buffer is full (then
        ``await write(data)``). ``ClientDisconnected`` when the connection is gone or closing (as uvicorn's
        ``send`` raises)."""
        protocol = self._protocol
        if not protocol.writable.is_set():
            return False
        if protocol.disconnected or protocol.close_sent or protocol.conn.state is not OPEN:
            raise ClientDisconnected()
        protocol.transport.write(data)
        return True

    async def write(self, data: bytes) -> None:
        """Write ``data`` (whole frames), waiting while the transport's buffer is full."""
        protocol = self._protocol
        if not protocol.writable.is_set():
            await protocol.writable.wait()
        if protocol.disconnected or protocol.close_sent or protocol.conn.state is not OPEN:
            raise ClientDisconnected()
        protocol.transport.write(data)


def frame_writer(send: Any) -> FrameWriter | None:
    """A writer for the connection ``send`` is the ASGI ``send`` of, when it may be written to directly."""
    protocol = getattr(send, "__self__", None)
    if not isinstance(protocol, WebSocketServerProtocol) or protocol.conn.extensions:
        return None
    return FrameWriter(protocol)
