"""Tool services are upstreams too: an endless or oversized answer fails the tool, memory stays bounded."""

from __future__ import annotations

import tracemalloc

import aiohttp
import pytest

from gateway.tools import ToolFailure, bounded
from gateway.tools.http_source import HttpToolSource
from tests.tools.helpers import http_tool
from tests.upstream.hostile import Server, answer_once, endless

LIMIT = 1024 * 1024


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounded, "MAX_TOOL_RESPONSE_BYTES", LIMIT)


async def _call(url: str) -> str:
    async with aiohttp.ClientSession() as session:
        source = HttpToolSource([http_tool("t", url)], session)
        return await source.call("t", {})


async def test_an_endless_chunked_answer_fails_with_memory_near_the_limit(small_limit: None) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
    piece = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
    async with Server(endless(head, piece)) as server:
        tracemalloc.start()
        try:
            with pytest.raises(ToolFailure, match="larger than 1 MiB"):
                await _call(server.url)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 4 * LIMIT


async def test_a_declared_length_over_the_limit_is_refused_before_reading(small_limit: None) -> None:
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {LIMIT * 100}\r\n\r\n".encode()
    async with Server(answer_once(head, b"x" * 1000, hold_s=0.5)) as server:
        with pytest.raises(ToolFailure, match="larger than"):
            await _call(server.url)


async def test_an_answer_within_the_limit_is_returned_whole(small_limit: None) -> None:
    body = b"y" * (LIMIT - 10)
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    async with Server(answer_once(head, body)) as server:
        assert await _call(server.url) == body.decode()


class _Content:
    """Feeds ``iter_chunked`` from fixed pieces, like aiohttp's StreamReader."""

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = pieces

    async def iter_chunked(self, size: int):
        for piece in self._pieces:
            yield piece


class _Response:
    content_length = None

    def __init__(self, pieces: list[bytes]) -> None:
        self.content = _Content(pieces)


async def _events(pieces: list[bytes], limit: int = LIMIT) -> list[bytes]:
    return [event async for event in bounded.sse_data(_Response(pieces), "an MCP server", limit)]  # type: ignore[arg-type]


async def test_sse_events_larger_than_aiohttps_line_cap_are_read_across_chunks() -> None:
    big = b"z" * 300_000  # aiohttp's readline would refuse a line this long (128 KiB)
    stream = b": keep-alive\r\ndata: " + big + b"\r\ndata: two\r\n\r\ndata: last"
    pieces = [stream[i:i + 7000] for i in range(0, len(stream), 7000)]
    assert await _events(pieces) == [big + b"\ntwo", b"last"]


async def test_an_sse_stream_past_the_limit_fails() -> None:
    with pytest.raises(ToolFailure, match="larger than"):
        await _events([b"data: " + b"a" * 60_000 + b"\n\n"] * 40, limit=LIMIT)
