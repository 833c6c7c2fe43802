"""A raw client of the Responses API's WebSocket mode for the e2e tests (the ``websockets`` library, sync).

The tests that need the official SDK's client use ``client.responses.connect()``; these helpers are for
what an SDK would never send (garbage, binary, hostile frames) and for reading close codes and the
handshake's HTTP refusals.
"""

from __future__ import annotations

import struct
import time
from typing import Any

import orjson
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from tests.e2e.conftest import KEY, Gateway

TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed", "error"})


def open_socket(gateway: Gateway, key: str | None = KEY, path: str = "/v1/responses") -> ClientConnection:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return connect(f"ws://127.0.0.1:{gateway.port}{path}", additional_headers=headers, max_size=None,
                   open_timeout=10, close_timeout=5, legacy=True)


def refused_status(gateway: Gateway, key: str | None = KEY, path: str = "/v1/responses") -> tuple[int, Any]:
    """The HTTP status and JSON body the handshake was refused with (fails if it was accepted)."""
    try:
        socket = open_socket(gateway, key, path)
    except InvalidStatus as refused:
        return refused.response.status_code, orjson.loads(refused.response.body or b"null")
    socket.close()
    raise AssertionError("the handshake was accepted")


def send(socket: ClientConnection, **body: Any) -> None:
    socket.send(orjson.dumps({"type": "response.create", **body}).decode())


def events_until_end(socket: ClientConnection, timeout_s: float = 20.0) -> list[dict[str, Any]]:
    """Every event up to and including a terminal one (or an ``error``)."""
    events: list[dict[str, Any]] = []
    while True:
        event = orjson.loads(socket.recv(timeout=timeout_s))
        events.append(event)
        if event["type"] in TERMINAL:
            return events


def turn(socket: ClientConnection, **body: Any) -> list[dict[str, Any]]:
    send(socket, **body)
    return events_until_end(socket)


def final(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The terminal event's Response (asserting the turn was not refused)."""
    assert events[-1]["type"] != "error", events[-1]
    response: dict[str, Any] = events[-1]["response"]
    return response


def next_event(socket: ClientConnection, timeout_s: float = 20.0) -> dict[str, Any]:
    event: dict[str, Any] = orjson.loads(socket.recv(timeout=timeout_s))
    return event


def next_error(socket: ClientConnection, timeout_s: float = 20.0) -> dict[str, Any]:
    """The next ``error`` event, skipping a running turn's events (none of them may end it first)."""
    while True:
        event = next_event(socket, timeout_s)
        if event["type"] == "error":
            return event
        assert event["type"] not in TERMINAL, f"the turn ended before the error came: {event['type']}"


def closed_with(socket: ClientConnection, timeout_s: float = 20.0) -> tuple[int, str]:
    """Wait for the server to close the connection: its close code and reason (messages before it are skipped)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.recv(timeout=max(deadline - time.monotonic(), 0.01))
        except ConnectionClosed as closed:
            assert closed.rcvd is not None, "the connection ended without a close frame"
            return closed.rcvd.code, closed.rcvd.reason
        except TimeoutError:
            break
    raise AssertionError("the server did not close the connection")


def send_frame_head(socket: ClientConnection, length: int) -> None:
    """The head of a masked text frame announcing ``length`` payload bytes, written raw, and none of the payload:
    what a client about to send a huge message writes first."""
    head = struct.pack("!BBQ", 0x81, 0x80 | 127, length) + b"\x00\x00\x00\x00"
    socket.socket.sendall(head)
