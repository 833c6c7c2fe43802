"""The WebSocket side of the server: uvicorn's sans-I/O protocol, told when a connection is lost, with the lean
paths a Responses connection takes every time.

:class:`WebSocketServerProtocol` is what ``loopgate serve`` runs WebSocket connections on (uvicorn's
``ws`` setting, gateway/cli.py): uvicorn's ``websockets-sansio`` protocol, which also

* calls ``on_lost`` the moment its connection is lost, so the application can stop work done for a
  client that is gone without a task reading the socket for it (a Responses turn waiting for its
  first output: gateway/api/responses/ws_connection.py);
* answers a plainly valid opening handshake from the head the HTTP protocol parsed (``upgraded``,
  http/websocket_handshake.py) instead of the library parsing it again;
* reads a read that is one whole masked text frame (a client's message) or close frame (a client
  ending the connection) in C, everything else through the library (``data_received``);
* queues what the application receives in :class:`Inbox` rather than an ``asyncio.Queue``.

Frames are written straight to the connection by http/websocket_frames.py. What each saves:
bench/README.md (the Responses API's WebSocket mode).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import Close, apply_mask
from websockets.protocol import CLOSING, OPEN

from gateway.http.websocket_handshake import PROTOCOL, accept_key, refusal, subprotocols, switching, target


class WebSocketServerProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol that also calls ``on_lost`` once its connection is lost, takes a
    plainly valid handshake from the HTTP protocol's parse (``upgraded``) and reads a whole masked text frame in C
    (``data_received``)."""

    #: set by the application for the connection it serves (``FrameWriter.when_lost``)
    on_lost: Callable[[], None] | None = None
    #: the handshake's ``Sec-WebSocket-Accept`` when it was taken from the HTTP protocol's parse (``upgraded``)
    accept: bytes | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queue: Inbox = Inbox()  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        on_lost, self.on_lost = self.on_lost, None
        if on_lost is not None:
            on_lost()

    # -- the opening handshake (http/websocket_handshake.py) -------------------------------------
    def taken_over(self, transport: Any, server: Any, client: Any, scheme: str) -> None:
        """``connection_made`` for a connection the HTTP protocol hands over: its addresses as that protocol read
        them (uvicorn's ``connection_made`` asks the socket again)."""
        self.connections.add(self)
        self.transport = transport
        self.server, self.client = server, client
        self.scheme = "wss" if scheme == "https" else "ws"

    def upgraded(self, scope: dict[str, Any], url: bytes) -> bool:
        """Take the handshake of the request the HTTP protocol parsed (``scope``, its request target ``url``):
        False (nothing done) when it is not plainly valid, for the library to judge from the raw head."""
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        found = dict(headers)
        accept = accept_key(scope["method"], scope["http_version"], headers, found,
                            bool(self.config.ws_per_message_deflate))
        if accept is None:
            return False
        self.accept = accept
        # The library's protocol, past its handshake: its parser restarted reads frames from the first byte.
        conn = self.conn
        conn.state = OPEN
        conn.parser = conn.parse()
        next(conn.parser)
        self.handshake_initiated = True
        path, raw_path, query = target(url, self.root_path)
        self.scope = {"type": "websocket", "asgi": {"version": self.asgi_version, "spec_version": "2.4"},
                      "http_version": "1.1", "scheme": self.scheme, "server": self.server, "client": self.client,
                      "root_path": self.root_path, "path": path, "raw_path": raw_path, "query_string": query,
                      "headers": headers, "subprotocols": subprotocols(headers) if PROTOCOL in found else [],
                      "state": scope["state"], "extensions": {"websocket.http.response": {}}}
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
        if (self.accept is not None and self.handshake_complete and not self.close_sent and conn.state is OPEN
                and conn.current_size is None and not conn.reader.buffer):
            first = data[:1]
            if first == b"\x81":
                text = _text(data, self.config.ws_max_size)
                if text is not None:
                    self.queue.put_nowait({"type": "websocket.receive", "text": text})
                    if not self.read_paused:
                        self.read_paused = True
                        self.transport.pause_reading()
                    return
            elif first == b"\x88" and self._closed_by_client(data):
                return
        super().data_received(data)

    def _closed_by_client(self, data: bytes) -> bool:
        """A whole masked close frame with code 1000 or 1001 and no reason (how clients end a connection): echoed
        and the connection closed, as the library and uvicorn do (RFC 6455 section 5.5.1; a server closes the TCP
        connection at once); False for any other, which the library reads."""
        if len(data) != 8 or data[1] != 0x82:
            return False
        code = int.from_bytes(apply_mask(data[6:], data[2:6]))
        if code != 1000 and code != 1001:
            return False
        conn = self.conn
        conn.close_rcvd = conn.close_sent = Close(code, "")
        conn.close_rcvd_then_sent = True
        conn.state = CLOSING
        self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": ""})
        self.transport.write(b"\x88\x02" + code.to_bytes(2))
        self.transport.close()
        return True


class Inbox:
    """What the application receives, in order: uvicorn's ``asyncio.Queue`` (``put_nowait``, ``get``, ``empty``)
    without its generality (no bound, no unfinished-task count, no loop binding), about half its bytecodes per
    message. Readers waiting together are woken in order, one per message."""

    __slots__ = ("_items", "_waiters")

    def __init__(self) -> None:
        self._items: collections.deque[Any] = collections.deque()
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def empty(self) -> bool:
        return not self._items

    def put_nowait(self, item: Any) -> None:
        self._items.append(item)
        self._wake()

    def _wake(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def get(self) -> Any:
        items = self._items
        while not items:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                elif items and not waiter.cancelled():  # woken, then cancelled: the message is the next reader's
                    self._wake()
                raise
        return items.popleft()


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
