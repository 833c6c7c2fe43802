"""The WebSocket side of the server: uvicorn's sans-I/O protocol, told when a connection is lost, and its frames
written straight to the connection, several per write.

:class:`WebSocketServerProtocol` is what ``loopgate serve`` runs WebSocket connections on (uvicorn's
``ws`` setting, gateway/cli.py): uvicorn's ``websockets-sansio`` protocol, which also calls
``on_lost`` the moment its connection is lost, so the application can stop work done for a client
that is gone without a task reading the socket for it (a Responses turn waiting for its first
output: gateway/api/responses/ws_connection.py).

:class:`FrameWriter`, why: a Responses turn sends some thirty events, and each ASGI
``websocket.send`` costs uvicorn's ``send`` coroutine, an encode of the text, the ``websockets``
library's frame object and its serialisation and a write system call: about 8k instructions per
event, which made a turn over a socket dearer than the same response over HTTP (bench/README.md).
The events of one upstream read are written here in one write instead, each as the unmasked,
unfragmented text frame the library would have made (RFC 6455 section 5.2; a server never masks),
from bytes that are UTF-8 already (the gateway's own JSON).

Only where that is exactly what the library would send: this protocol, its connection open, and
no extension negotiated (permessage-deflate must compress every frame: ``websocket.compression``
then leaves the writing to ASGI). Frames are written in the order they are made, as the library's
own writes are (one thread, each written at once), and the writer waits while the transport's
buffer is full, as uvicorn's ``send`` does.
"""

from __future__ import annotations

import itertools
import operator
import struct
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import apply_mask
from websockets.protocol import OPEN, SERVER, Protocol

from gateway.http.websocket_handshake import accept_key, refusal, subprotocols, switching, target


class WebSocketServerProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol that also calls ``on_lost`` once its connection is lost, takes a
    plainly valid handshake from the HTTP protocol's parse (``upgraded``) and reads a whole masked text frame in C
    (``data_received``)."""

    #: set by the application for the connection it serves (``FrameWriter.when_lost``)
    on_lost: Callable[[], None] | None = None
    #: the handshake's ``Sec-WebSocket-Accept`` when it was taken from the HTTP protocol's parse (``upgraded``)
    accept: bytes | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        on_lost, self.on_lost = self.on_lost, None
        if on_lost is not None:
            on_lost()

    # -- the opening handshake (http/websocket_handshake.py) -------------------------------------
    def upgraded(self, scope: dict[str, Any], url: bytes) -> bool:
        """Take the handshake of the request the HTTP protocol parsed (``scope``, its request target ``url``):
        False (nothing done) when it is not plainly valid, for the library to judge from the raw head."""
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        accept = accept_key(scope["method"], scope["http_version"], headers, bool(self.config.ws_per_message_deflate))
        if accept is None:
            return False
        self.accept = accept
        # The library's parser, past its handshake: it reads frames from the first byte.
        self.conn = Protocol(SERVER, state=OPEN, max_size=self.config.ws_max_size, logger=self.logger)  # type: ignore[assignment]
        self.handshake_initiated = True
        path, raw_path, query = target(url, self.root_path)
        self.scope = {"type": "websocket", "asgi": {"version": self.asgi_version, "spec_version": "2.4"},
                      "http_version": "1.1", "scheme": self.scheme, "server": self.server, "client": self.client,
                      "root_path": self.root_path, "path": path, "raw_path": raw_path, "query_string": query,
                      "headers": headers, "subprotocols": subprotocols(headers), "state": scope["state"],
                      "extensions": {"websocket.http.response": {}}}
        self.queue.put_nowait({"type": "websocket.connect"})
        task = self.loop.create_task(self.run_asgi())
        task.add_done_callback(self.on_task_complete)
        self.tasks.add(task)
        return True

    async def send(self, message: Any) -> None:
        if self.accept is None or (self.handshake_complete and self.initial_response is None):
            await super().send(message)  # the library's handshake, or an accepted connection
            return
        await self.writable.wait()
        if self.disconnected:
            raise ClientDisconnected()
        kind = message["type"]
        if self.initial_response is not None:  # the application's denial: its body
            if kind != "websocket.http.response.body":
                raise RuntimeError(f"Expected ASGI message 'websocket.http.response.body' but got '{kind}'.")
            status, headers, body = self.initial_response
            self.initial_response = (status, headers, body + message["body"])
            if not message.get("more_body", False):
                self.queue.put_nowait({"type": "websocket.disconnect", "code": 1006})
                self._refuse(status, headers, body + message["body"])  # type: ignore[arg-type]
        elif kind == "websocket.accept":
            if not self.transport.is_closing():
                self.handshake_complete = True
                self.transport.write(switching(self.accept, [*self.default_headers, *message.get("headers", ())],
                                               message.get("subprotocol")))
                self.start_keepalive()
        elif kind == "websocket.close":  # refused before it was accepted
            self.queue.put_nowait({"type": "websocket.disconnect", "code": 1006})
            self._refuse(HTTPStatus.FORBIDDEN, [], b"")
        elif kind == "websocket.http.response.start" and self.initial_response is None:
            if not 100 <= message["status"] < 600:
                raise RuntimeError(f"Invalid HTTP status code '{message['status']}' in response.")
            self.initial_response = (message["status"], list(message.get("headers", ())), b"")
            self.handshake_complete = True
        else:
            raise RuntimeError("Expected ASGI message 'websocket.accept', 'websocket.close' or "
                               f"'websocket.http.response.start' but got '{kind}'.")

    def send_500_response(self) -> None:
        if self.accept is None:
            super().send_500_response()
        elif not (self.initial_response or self.handshake_complete):
            self._refuse(500, [], b"Internal Server Error")

    def _refuse(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.close_sent = self.handshake_complete = True
        self.transport.write(refusal(status, [*self.default_headers, *headers], body))
        self.transport.close()

    # -- frames ----------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        """A read that is exactly one whole masked text frame, on an open connection with nothing half read, is
        unmasked and decoded in C; anything else (a fragment, a control frame, several frames, a partial one,
        invalid UTF-8, past ``ws_max_size``) goes through the library as before."""
        conn = self.conn
        if (data[:1] == b"\x81" and self.accept is not None and self.handshake_complete and not self.close_sent
                and conn.state is OPEN and conn.current_size is None and not conn.reader.buffer):
            text = _text(data, self.config.ws_max_size)
            if text is not None:
                self.queue.put_nowait({"type": "websocket.receive", "text": text})
                if not self.read_paused:
                    self.read_paused = True
                    self.transport.pause_reading()
                return
        super().data_received(data)


def _text(data: bytes, max_size: int | None) -> str | None:
    """The text of ``data`` when it is one whole, final, masked text frame (its first byte checked), within
    ``max_size``; None otherwise."""
    second = data[1] if len(data) > 1 else 0
    if not second & 0x80:  # unmasked (the library fails the connection) or too short
        return None
    length = second & 0x7F
    start = 6
    if length == 126:
        length, start = int.from_bytes(data[2:4]), 8
    elif length == 127:
        length, start = int.from_bytes(data[2:10]), 14
    if len(data) != start + length or (max_size is not None and length > max_size):
        return None
    try:
        return apply_mask(data[start:], data[start - 4:start]).decode()
    except UnicodeDecodeError:
        return None


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


class FrameWriter:
    """Writes text messages to one connection; see the module docstring. Made by :func:`frame_writer`."""

    __slots__ = ("_protocol",)

    def __init__(self, protocol: WebSocketServerProtocol) -> None:
        self._protocol = protocol

    def when_lost(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the event loop, at once) when the connection is lost."""
        self._protocol.on_lost = callback

    async def write(self, payloads: list[bytes]) -> None:
        """Each payload (UTF-8 text) as one message, all in one write; ``ClientDisconnected`` when the
        connection is gone or closing (as uvicorn's ``send`` raises)."""
        await self._write(_framed(payloads))

    async def write_events(self, body: bytes) -> bool:
        """Whole Server-Sent Events (as ``http/sse_response`` writes them): each event's data as one message,
        all in one write; False (nothing written) when ``body`` is not whole events. Every upstream read of
        a Responses stream comes here: split, measured and framed in C (``_framed``), no Python step per event."""
        if not body.endswith(_END) or not body.startswith(_FIRST):
            return not body  # nothing to write, or not whole events
        # The cuts are found by a skipping search for a nine-byte needle, not a scan of every byte: the
        # events carry the whole Response (its created, its terminal event), most of a stream's bytes.
        payloads = list(map(_AFTER, map(bytes.partition, body.split(_BETWEEN), itertools.repeat(_DATA))))
        payloads[-1] = payloads[-1][:-2]  # the last event's data, without the blank line that ends the body
        await self._write(_framed(payloads))
        return True

    async def _write(self, data: bytes) -> None:
        protocol = self._protocol
        if not protocol.writable.is_set():
            await protocol.writable.wait()
        if protocol.disconnected or protocol.close_sent or protocol.conn.state is not OPEN:
            raise ClientDisconnected()
        protocol.transport.write(data)


def _framed(payloads: list[bytes]) -> bytes:
    """The payloads as final text frames, joined: each after its head (``_HEADS``), laid out by slice assignment."""
    parts = payloads * 2
    parts[::2] = map(_HEADS.__getitem__, map(len, payloads))
    parts[1::2] = payloads
    return b"".join(parts)


def frame_writer(send: Any) -> FrameWriter | None:
    """A writer for the connection ``send`` is the ASGI ``send`` of, when it may be written to directly."""
    protocol = getattr(send, "__self__", None)
    if not isinstance(protocol, WebSocketServerProtocol) or protocol.conn.extensions:
        return None
    return FrameWriter(protocol)
