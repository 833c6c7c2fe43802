"""The few parts of an HTTP request the API reads, taken from the raw ASGI scope in one pass.

Starlette's ``Request.headers.get`` scans the header list and raises and catches ``KeyError``
for a header that is absent, which is slow for optional headers such as ``x-gateway-headless``
(bench/README.md). One ``dict`` over the raw pairs answers every lookup at C speed.
ASGI servers lower-case header names, so the bytes keys below match as they are.
"""

from __future__ import annotations

from typing import Any

from starlette.types import Receive, Scope

_TRUE = frozenset({b"1", b"true", b"yes", b"on"})


class Incoming:
    #: a WebSocket turn whose answer may be WebSocket frames, written to the connection as they are (``for_message``;
    #: a class attribute: an HTTP request pays nothing for it)
    socket = False

    __slots__ = ("authorization", "body_bytes", "content_length", "headers", "headless", "parsed", "raw_headers",
                 "receive", "request_id", "traceparent")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        raw: list[tuple[bytes, bytes]] = scope["headers"]
        headers: dict[bytes, bytes] = dict(raw)
        #: every header by lower-case name (the last of a repeated one) and the raw list, for a surface's own
        self.headers = headers
        self.raw_headers = raw
        self.receive = receive
        #: the body's size once ``read_json`` read it (the rate limits' token estimate)
        self.body_bytes = 0
        #: the ``Authorization`` value, empty when absent, ``None`` when sent more than once: the dict
        #: keeps the last, and "the last one wins" must never pick a caller's key (auth.py rejects it)
        self.authorization: str | None = headers.get(b"authorization", b"").decode("latin-1")
        if len(headers) != len(raw) and sum(name == b"authorization" for name, _ in raw) > 1:
            self.authorization = None
        self.content_length: bytes | None = headers.get(b"content-length")
        #: ``x-gateway-headless`` asks for a headless run (nothing pauses: such calls are denied)
        self.headless: bool = headers.get(b"x-gateway-headless", b"").strip().lower() in _TRUE
        #: the caller's ``x-request-id`` (checked by ``request_id.request_id``) and W3C ``traceparent``, raw
        self.request_id: bytes | None = headers.get(b"x-request-id")
        self.traceparent: bytes | None = headers.get(b"traceparent")
        #: the body, already parsed (a WebSocket message's: ``for_message``); None: read from ``receive``
        self.parsed: Any = None

    def for_message(self, body: Any, size: int, framed: bool = False) -> Incoming:
        """One message of the WebSocket connection this is the upgrade request of, as a request of its own: the
        connection's headers (its key, ``x-gateway-headless``, ``traceparent``), ``body`` (parsed, ``size``
        bytes) as the body, and an id of its own (the upgrade's ``x-request-id`` names the connection).
        ``framed``: its answer may be WebSocket frames (``socket``: the connection is written to directly)."""
        turn = Incoming.__new__(_SocketTurn if framed else Incoming)
        turn.headers = self.headers
        turn.raw_headers = self.raw_headers
        turn.receive = self.receive
        turn.authorization = self.authorization
        turn.content_length = None
        turn.headless = self.headless
        turn.request_id = None
        turn.traceparent = self.traceparent
        turn.parsed = body
        turn.body_bytes = size
        return turn


class _SocketTurn(Incoming):
    """A WebSocket turn whose answer may be WebSocket frames (``Incoming.for_message``)."""

    __slots__ = ()
    socket = True
