"""The WebSocket protocol's own paths (http/websocket_handshake.py, http/websocket_server.py) against the library's.

Each case sends the same raw bytes to two servers, both behind the gateway's HTTP protocol: one
with the gateway's WebSocket protocol (a plain handshake answered from the HTTP parse, a whole
masked text or close frame read in C), one with uvicorn's stock ``websockets-sansio`` protocol
(everything through the library). What comes back, and what the application sees, must agree,
for the handshakes and frames the fast paths take and for those they leave to the library.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader

from gateway.http.server_protocol import ServerLimits, protocol_factory
from gateway.http.websocket_server import Inbox, WebSocketServerProtocol
from tests.ports import free_port

_KEY = base64.b64encode(b"0123456789abcdef")
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _error_body(status: int, message: str, code: str) -> bytes:
    return message.encode()


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Refuses ``/deny`` (403 body) and ``/close`` (close before accepting); otherwise accepts, echoes every text
    message with what it saw (``type``, the path, the ``x-probe`` header), then reports how it ended."""
    if scope["type"] != "websocket":
        return
    await receive()  # websocket.connect
    if scope["path"] == "/deny":
        await send({"type": "websocket.http.response.start", "status": 403, "headers": [(b"x-why", b"no")]})
        await send({"type": "websocket.http.response.body", "body": b"denied"})
        return
    if scope["path"] == "/close":
        await send({"type": "websocket.close"})
        return
    probe = dict(scope["headers"]).get(b"x-probe", b"-").decode()
    await send({"type": "websocket.accept", "headers": [(b"x-request-id", b"conn-1")]})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            ENDED.append(message.get("code"))
            return
        await send({"type": "websocket.send", "text": f"{scope['path']}|{probe}|{message.get('text')}"})


ENDED: list[int | None] = []


class _Server:
    def __init__(self, ws: type, compression: bool) -> None:
        self.port = free_port()
        self.compression = compression
        http = protocol_factory(ServerLimits(), _error_body)
        config = uvicorn.Config(_app, host="127.0.0.1", port=self.port, http=http, ws=ws, log_level="warning",  # type: ignore[arg-type]
                                lifespan="off", ws_max_size=1000, ws_ping_interval=None,
                                ws_per_message_deflate=compression)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        for _ in range(1500):
            if self.server.started:
                return
            threading.Event().wait(0.02)
        raise AssertionError("the server did not start")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "compression"])
def servers(request: pytest.FixtureRequest) -> Iterator[dict[str, _Server]]:
    """The two servers, with ``websocket.compression`` off (the default: the gateway's own paths) or on (an offered
    extension is the library's to negotiate)."""
    both = {"gateway": _Server(WebSocketServerProtocol, request.param),
            "library": _Server(WebSocketsSansIOProtocol, request.param)}
    yield both
    for server in both.values():
        server.stop()


def _handshake(path: str = "/chat", extra: bytes = b"", version: bytes = b"13", key: bytes = _KEY) -> bytes:
    return (b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: " + version + b"\r\nX-Probe: yes\r\n"
            + extra + b"\r\n")


def _masked(first: int, payload: bytes, mask: bytes = b"\x01\x02\x03\x04") -> bytes:
    length = len(payload)
    head = bytes((first, 0x80 | length)) if length < 126 else bytes((first, 0x80 | 126)) + length.to_bytes(2)
    return head + mask + bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))


def _exchange(port: int, sends: list[bytes]) -> tuple[bytes, bytes]:
    """The handshake answer's head and what the server sent after it (frames, or a refusal's body), each of
    ``sends`` written as one read."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(sends[0])
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        for message in sends[1:]:
            threading.Event().wait(0.05)  # one read each
            try:
                sock.sendall(message)
            except OSError:
                break
        sock.settimeout(1.0)
        while True:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, OSError):
                break
            if not chunk:
                break
            rest += chunk
    return head, rest


def _frames(data: bytes) -> list[tuple[Opcode, bytes]]:
    reader = StreamReader()
    reader.feed_data(data)
    frames = []
    while reader.buffer:
        try:
            next(Frame.parse(reader.read_exact, mask=False))
        except StopIteration as done:
            frames.append((done.value.opcode, bytes(done.value.data)))
    return frames


def _status(head: bytes) -> bytes:
    return head.split(b"\r\n", 1)[0]


CASES: dict[str, list[bytes]] = {
    "a text message, then a close": [_handshake(), _masked(0x81, b"hi"), _masked(0x88, (1000).to_bytes(2))],
    "a long text message": [_handshake(), _masked(0x81, "é".encode() * 200), _masked(0x88, (1001).to_bytes(2))],
    "a fragmented message": [_handshake(), _masked(0x01, b"frag") + _masked(0x80, b"ment"),
                             _masked(0x88, (1000).to_bytes(2))],
    "two messages in one read": [_handshake(), _masked(0x81, b"a") + _masked(0x81, b"b"),
                                 _masked(0x88, (1000).to_bytes(2))],
    "a ping": [_handshake(), _masked(0x89, b"p"), _masked(0x88, (1000).to_bytes(2))],
    "an unmasked frame": [_handshake(), b"\x81\x02hi"],
    "invalid UTF-8": [_handshake(), _masked(0x81, b"\xff\xfe")],
    "past the size bound": [_handshake(), _masked(0x81, b"x" * 1001)],
    "a close with a reason": [_handshake(), _masked(0x88, (1000).to_bytes(2) + b"bye")],
    "a close with another code": [_handshake(), _masked(0x88, (4000).to_bytes(2))],
    "an empty close": [_handshake(), _masked(0x88, b"")],
    "a wrong version": [_handshake(version=b"8")],
    "a short key": [_handshake(key=base64.b64encode(b"short"))],
    "two keys": [_handshake(extra=b"Sec-WebSocket-Key: " + _KEY + b"\r\n")],
    "an offered extension": [_handshake(extra=b"Sec-WebSocket-Extensions: permessage-deflate\r\n"),
                             _masked(0x81, b"x"), _masked(0x88, (1000).to_bytes(2))],
    "a subprotocol offered": [_handshake(extra=b"Sec-WebSocket-Protocol: a, b\r\n"), _masked(0x81, b"x")],
    "denied by the application": [_handshake("/deny")],
    "closed before it was accepted": [_handshake("/close")],
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_gateway_answers_as_the_library_does(servers: dict[str, _Server], name: str) -> None:
    answers = {}
    for which, server in servers.items():
        ENDED.clear()
        head, sent = _exchange(server.port, CASES[name])  # frames compared as bytes: deflate's are the same too
        for _ in range(25):  # the application sees the end after the socket closed
            if ENDED:
                break
            threading.Event().wait(0.02)
        answers[which] = (_status(head), sent, list(ENDED))
        if which == "gateway" and _status(head).endswith(b"101 Switching Protocols"):
            lines = head.lower().split(b"\r\n")
            wanted = base64.b64encode(hashlib.sha1(_KEY + _GUID).digest()).lower()
            assert b"sec-websocket-accept: " + wanted in lines
            assert b"x-request-id: conn-1" in lines
            # Its own answer (lower-case names) unless an extension is the library's to negotiate.
            own = not (server.compression and b"Extensions" in CASES[name][0])
            assert (b"upgrade: websocket" in head.split(b"\r\n")) == own
        if which == "gateway" and name == "denied by the application":
            assert head.lower().count(b"x-why: no") == 1
    assert answers["gateway"] == answers["library"]


def test_an_echo_sees_the_lower_case_headers_and_the_path(servers: dict[str, _Server]) -> None:
    head, sent = _exchange(servers["gateway"].port, [_handshake("/p%20q"), _masked(0x81, b"x")])
    assert _status(head).endswith(b"101 Switching Protocols")
    assert _frames(sent)[0] == (Opcode.TEXT, b"/p q|yes|x")


def test_the_inbox_hands_messages_in_order_to_waiting_readers() -> None:
    async def scenario() -> list[Any]:
        inbox = Inbox()
        first = asyncio.ensure_future(inbox.get())
        second = asyncio.ensure_future(inbox.get())
        cancelled = asyncio.ensure_future(inbox.get())
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.sleep(0)
        inbox.put_nowait(1)
        inbox.put_nowait(2)
        got = [await first, await second]
        inbox.put_nowait(3)
        assert not inbox.empty()
        got.append(await inbox.get())
        assert inbox.empty()
        woken = asyncio.ensure_future(inbox.get())
        await asyncio.sleep(0)
        inbox.put_nowait(4)
        woken.cancel()  # woken, then cancelled before it ran: the message waits for the next reader
        await asyncio.sleep(0)
        got.append(await asyncio.wait_for(inbox.get(), 1))
        return got

    assert asyncio.run(scenario()) == [1, 2, 3, 4]


def test_a_random_key_is_accepted_as_the_rfc_says() -> None:
    from gateway.http.websocket_handshake import accept_key

    key = base64.b64encode(os.urandom(16))
    headers = [(b"sec-websocket-key", key), (b"sec-websocket-version", b"13")]
    accept = accept_key("GET", "1.1", headers, dict(headers), False)
    assert accept == base64.b64encode(hashlib.sha1(key + _GUID).digest())
    assert accept_key("POST", "1.1", headers, dict(headers), False) is None
    assert accept_key("GET", "1.0", headers, dict(headers), False) is None
    offered = [*headers, (b"sec-websocket-extensions", b"permessage-deflate")]
    assert accept_key("GET", "1.1", offered, dict(offered), False) == accept  # nothing to negotiate: ignored
    assert accept_key("GET", "1.1", offered, dict(offered), True) is None  # compression on: the library's
