"""The opening handshake of a WebSocket connection, answered from the request head the HTTP protocol already parsed.

Why: uvicorn hands an upgrade to its WebSocket protocol by writing the parsed head back out as
bytes, which the ``websockets`` library then parses again in Python (its request line and header
reader, its ``Headers``), checks, and answers with a ``Response`` it builds and serialises, logging
two INFO lines per connection on the way. That was about 10k bytecodes (~1M instructions) per
connection, close to the whole cost of a Responses turn (bench/README.md). A handshake that is
plainly valid (RFC 6455 section 4.2.1: ``GET``, HTTP/1.1, ``Upgrade: websocket``, ``Connection:
upgrade``, version 13, one key of 16 bytes, no extension to negotiate) needs none of it: its
``Sec-WebSocket-Accept`` is a SHA-1 and a base64 in C (:func:`accept_key`), its answer one bytes
template (:func:`switching`). Anything else (an extension offered when compression is on, a
missing or repeated header, another version) is :func:`accept_key`'s None, and the library
judges it exactly as before, with its own error answers.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from http import HTTPStatus
from urllib.parse import unquote

import httptools

#: RFC 6455 section 1.3: what the key is hashed with
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_SWITCHING = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: "
_KEY, _VERSION, _EXTENSIONS = b"sec-websocket-key", b"sec-websocket-version", b"sec-websocket-extensions"
_ONCE = (_KEY, _VERSION)
PROTOCOL = b"sec-websocket-protocol"


def accept_key(method: str, http_version: str, headers: list[tuple[bytes, bytes]], found: dict[bytes, bytes],
               extensions: bool) -> bytes | None:
    """The ``Sec-WebSocket-Accept`` of a plainly valid handshake (``headers``: lower-case names, as the HTTP
    protocol parsed them; ``found``: the same as a dict); None for any other, which the library then judges.
    ``extensions``: whether an extension may be negotiated (compression on): an offer of one is left to the
    library."""
    if method != "GET" or http_version != "1.1" or (extensions and _EXTENSIONS in found):
        return None
    if len(found) != len(headers) and any(sum(name == wanted for name, _ in headers) > 1 for wanted in _ONCE):
        return None  # a repeated key or version
    key = found.get(_KEY)
    if key is None or found.get(_VERSION) != b"13":
        return None
    try:
        if len(base64.b64decode(key, validate=True)) != 16:
            return None
    except binascii.Error:
        return None
    return base64.b64encode(hashlib.sha1(key + _GUID).digest())


def switching(accept: bytes, headers: list[tuple[bytes, bytes]], subprotocol: str | None) -> bytes:
    """The ``101 Switching Protocols`` answer: ``headers`` (the server's and the application's) after the
    handshake's own."""
    lines = [_SWITCHING, accept, b"\r\n"]
    for name, value in headers:
        lines += (name, b": ", value, b"\r\n")
    if subprotocol:
        lines += (b"sec-websocket-protocol: ", subprotocol.encode("latin-1"), b"\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


def refusal(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    """An HTTP answer that refuses the handshake (the application's denial, a 403, a 500), as the library writes
    one: ``Connection: close`` and a length, a plain-text type unless the application gave one."""
    names = {name.lower() for name, _ in headers}
    extra = [(b"connection", b"close"), (b"content-length", str(len(body)).encode()),
             (b"content-type", b"text/plain; charset=utf-8")]
    lines = [b"HTTP/1.1 %d %s\r\n" % (status, _phrase(status).encode())]
    for name, value in [*headers, *[(name, value) for name, value in extra if name not in names]]:
        lines += (name, b": ", value, b"\r\n")
    lines += (b"\r\n", body)
    return b"".join(lines)


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def target(url: bytes, root_path: str) -> tuple[str, bytes, bytes]:
    """The ASGI ``path``, ``raw_path`` and ``query_string`` of a request target (as uvicorn makes them)."""
    parsed = httptools.parse_url(url)
    raw_path: bytes = parsed.path
    path = raw_path.decode("ascii")
    return root_path + (unquote(path) if "%" in path else path), root_path.encode("ascii") + raw_path, \
        parsed.query or b""


def subprotocols(headers: list[tuple[bytes, bytes]]) -> list[str]:
    """The subprotocols a client offers (``Sec-WebSocket-Protocol``, every value, comma-separated)."""
    offered: list[str] = []
    for name, value in headers:
        if name == PROTOCOL:
            offered += [token.strip() for token in value.decode("latin-1").split(",")]
    return offered
