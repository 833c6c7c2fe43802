"""The messages of the Responses API's WebSocket mode: what a client sends, and the ``error`` event.

A client sends JSON text messages, each with a ``type``:

* ``response.create``: the body of ``POST /v1/responses`` with ``"type"`` beside it (OpenAI's
  envelope). ``stream`` is implicit (every event is sent); ``background`` is refused (as OpenAI
  does over a socket); ``stream_id`` (OpenAI's multiplexed lanes) is refused: one connection is one
  lane here, open another for a parallel conversation. ``generate: false`` prepares the response
  without generating (``ws_prepared.py``). :func:`create_body` gives the body the Responses
  surface parses, as an HTTP POST's.
* ``response.processed``: an acknowledgement Codex sends after each response; nothing to do.

Anything else (not JSON, nested too deep, not an object, another ``type``, a binary message) is
answered with an ``error`` event and the connection stays usable.

The server sends the Responses stream's events, each the ``data`` of the SSE frame the HTTP
stream would carry (framed so by the renderer, ``responses/events.py``; an SSE body of another surface
cut into them by :class:`SSEEvents`), and, for a turn refused before
its first event (or a message refused), an ``error`` event in OpenAI's WebSocket shape:
``{"type": "error", "status": <HTTP status>, "error": {"type", "code", "message", "param",
"headers"}, "headers"}`` (:func:`error_event`; the error object is the HTTP error's, ``headers``
its rate-limit and request-id headers, at both places Codex and the SDK read them).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.api.chat.request import type_name
from gateway.errors import GatewayError, bad_request, quoted
from gateway.http.json_depth import MAX_DEPTH, JSONTooDeep, loads

CREATE = "response.create"
PROCESSED = "response.processed"
#: the headers of an HTTP error an ``error`` event carries (the rest describe the HTTP body)
_EVENT_HEADERS = frozenset({b"x-request-id", b"retry-after"})


def parse_message(text: str) -> dict[str, Any]:
    """A client's text message as a JSON object with a string ``type``; a 400 ``GatewayError`` otherwise."""
    try:
        message = loads(text)
    except JSONTooDeep:
        raise bad_request(f"the message is nested deeper than {MAX_DEPTH} levels", code="invalid_json") from None
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"the message is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise bad_request("a message must be a JSON object with a 'type' (send 'response.create')", "type",
                          "invalid_message")
    return message


def unknown_type(kind: str) -> GatewayError:
    return bad_request(f"unknown message type {quoted(kind)}: this connection takes 'response.create' (and "
                       "'response.processed' acknowledgements)", "type", "unknown_message_type")


def binary_refused() -> GatewayError:
    return bad_request("binary messages are not supported: send each message as JSON text", code="binary_message")


def create_body(message: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The ``POST /v1/responses`` body a ``response.create`` message stands for (``message`` is reused), and
    whether it generates (``generate: false`` prepares the response only: ``ws_prepared.py``)."""
    del message["type"]
    if message.pop("background", None):
        raise bad_request("'background' is not supported over WebSocket; create background responses with "
                          "POST /v1/responses", "background")
    if message.pop("stream_id", None) is not None:
        raise bad_request("'stream_id' (multiplexed lanes) is not supported by this gateway: open one connection "
                          "per parallel conversation", "stream_id")
    generate = message.pop("generate", None)
    if generate is not None and generate.__class__ is not bool:
        raise bad_request(f"'generate' must be a boolean, not {type_name(generate)}", "generate")
    message["stream"] = True
    return message, generate is not False


def error_event(status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> str:
    """The ``error`` event of an HTTP error answer (``body``: OpenAI's ``{"error": {...}}``), as JSON text."""
    try:
        error = orjson.loads(body)["error"]
        if not isinstance(error, dict):
            raise TypeError
    except (orjson.JSONDecodeError, KeyError, TypeError):
        error = {"message": body.decode("utf-8", "replace")[:1000], "type": "server_error", "param": None,
                 "code": None}
    shown = {name.decode("latin-1"): value.decode("latin-1") for name, value in headers or ()
             if name in _EVENT_HEADERS or name.startswith(b"x-ratelimit-")}
    event: dict[str, Any] = {"type": "error", "status": status, "error": error}
    if shown:
        error["headers"] = shown
        event["headers"] = shown
    return orjson.dumps(event).decode()


def gateway_error_event(error: GatewayError) -> str:
    """A refused message's ``error`` event (its headers, such as ``Retry-After``, included)."""
    headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in error.headers.items()]
    return error_event(error.status, error.body(), headers)


class SSEEvents:
    """The events of an SSE body written in any pieces: each event's ``data`` (its JSON), in order.

    The Responses stream's frames are ``event: NAME\\ndata: JSON\\n\\n`` and JSON never holds a raw
    newline, so an event ends at the first blank line. A body write usually holds whole frames; a
    large text's frame comes in slices (responses/spliced.py), kept until its end arrives.
    """

    __slots__ = ("pending",)

    def __init__(self) -> None:
        #: part of an event, waiting for its end
        self.pending: list[bytes] = []

    def __bool__(self) -> bool:
        """Whether part of an event is waiting for its end."""
        return bool(self.pending)

    def feed(self, chunk: bytes) -> list[bytes]:
        pending = self.pending
        if pending:
            if b"\n\n" not in chunk and not (chunk[:1] == b"\n" and pending[-1][-1:] == b"\n"):
                pending.append(chunk)  # a slice within a frame: joined once, when the frame ends
                return []
            chunk = b"".join(pending) + chunk
            pending.clear()
        frames = chunk.split(b"\n\n")
        rest = frames.pop()
        if rest:
            pending.append(rest)
        return [frame[frame.index(b"\ndata: ") + 7:] for frame in frames]
