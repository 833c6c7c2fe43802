"""JSON answers written whole by Loopgate's server: one write, every header, uvicorn's state kept right."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from gateway.http.json_response import JSONResponse


class Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _cycle(method: str = "POST", keep_alive: bool = True) -> tuple[RequestResponseCycle, Transport, list[int]]:
    transport = Transport()
    completed: list[int] = []
    cycle = RequestResponseCycle(
        scope={"type": "http", "method": method, "headers": []},  # type: ignore[typeddict-item]
        transport=transport,  # type: ignore[arg-type]
        flow=FlowControl(transport),  # type: ignore[arg-type]
        logger=logging.getLogger("test"), access_logger=logging.getLogger("test.access"), access_log=False,
        default_headers=[(b"date", b"Fri, 04 Dec 2026 10:00:00 GMT")], message_event=asyncio.Event(),
        expect_100_continue=False, keep_alive=keep_alive, on_response=lambda: completed.append(1))
    cycle.more_body = False  # the request's body was read to its end, as before any ordinary answer
    return cycle, transport, completed


async def _receive() -> Any:
    raise AssertionError("not read")


def _parse(raw: bytes) -> tuple[bytes, dict[bytes, bytes], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    return status, dict(line.split(b": ", 1) for line in lines), body


async def test_one_write_with_the_status_every_header_and_the_body() -> None:
    cycle, transport, completed = _cycle()
    response = JSONResponse(b'{"ok":true}', 200, raw_headers=[(b"x-request-id", b"req_1"),
                                                             (b"x-ratelimit-remaining-requests", b"41")])
    await response(cycle.scope, _receive, cycle.send)
    assert len(transport.writes) == 1
    status, headers, body = _parse(transport.writes[0])
    assert status == b"HTTP/1.1 200 OK"
    assert headers == {b"date": b"Fri, 04 Dec 2026 10:00:00 GMT", b"content-type": b"application/json",
                       b"content-length": b"11", b"x-request-id": b"req_1", b"x-ratelimit-remaining-requests": b"41"}
    assert body == b'{"ok":true}'
    assert cycle.response_started and cycle.response_complete and cycle.message_event.is_set()
    assert completed == [1] and not transport.closed


async def test_a_connection_not_kept_alive_says_close_and_is_closed() -> None:
    cycle, transport, completed = _cycle(keep_alive=False)
    await JSONResponse(b"{}", 404)(cycle.scope, _receive, cycle.send)
    status, headers, _ = _parse(transport.writes[0])
    assert status == b"HTTP/1.1 404 Not Found" and headers[b"connection"] == b"close"
    assert transport.closed and completed == [1]


@pytest.mark.parametrize("case", ["headers", "head", "paused", "wrapped"])
async def test_the_two_asgi_messages_where_a_whole_write_does_not_apply(case: str) -> None:
    """Error headers are checked by uvicorn; HEAD, back-pressure and a wrapped send take the usual path."""
    cycle, transport, completed = _cycle(method="HEAD" if case == "head" else "POST")
    if case == "paused":
        cycle.flow.write_paused = True  # the writable event stays set: uvicorn's drain() returns at once
    sent: list[str] = []

    async def wrapped(message: Any) -> None:
        sent.append(message["type"])
        await cycle.send(message)

    response = JSONResponse(b"{}", 429, headers={"Retry-After": "1"} if case == "headers" else None,
                            raw_headers=[(b"x-request-id", b"req_2")])
    await response(cycle.scope, _receive, wrapped if case == "wrapped" else cycle.send)
    assert len(transport.writes) == (1 if case == "head" else 2)  # head and body apart (HEAD: no body)
    status, headers, _ = _parse(transport.writes[0])
    assert status == b"HTTP/1.1 429 Too Many Requests" and headers[b"x-request-id"] == b"req_2"
    if case == "headers":
        assert headers[b"retry-after"] == b"1"
    if case == "wrapped":
        assert sent == ["http.response.start", "http.response.body"]
    assert cycle.response_complete and completed == [1]


async def test_a_caller_gone_gets_nothing_written() -> None:
    cycle, transport, completed = _cycle()
    cycle.disconnected = True
    await JSONResponse(b"{}")(cycle.scope, _receive, cycle.send)
    assert transport.writes == [] and completed == []
