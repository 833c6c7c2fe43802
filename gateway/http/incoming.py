"""The few parts of an HTTP request the API reads, taken from the raw ASGI scope in one pass.

Starlette's ``Request.headers.get`` scans the header list and raises and catches ``KeyError``
for a header that is absent, which is slow for optional headers such as ``x-gateway-headless``
(bench/README.md). One ``dict`` over the raw pairs answers every lookup at C speed.
ASGI servers lower-case header names, so the bytes keys below match as they are.
"""

from __future__ import annotations

from starlette.types import Receive, Scope

_TRUE = frozenset({b"1", b"true", b"yes", b"on"})


class Incoming:
    __slots__ = ("authorization", "body_bytes", "content_length", "headers", "headless", "raw_headers", "receive",
                 "request_id", "traceparent")

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
