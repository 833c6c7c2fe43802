"""A hostile or broken upstream gets a canonical error, bounded memory, and a healthy client after.

Memory is measured with tracemalloc around the failing call; each limit is set to 1 MiB here
and the peak must stay well under three times that, whatever the upstream sends.
"""

from __future__ import annotations

import asyncio
import gzip
import time
import tracemalloc
import zlib
from collections.abc import Awaitable

import pytest

from gateway.config.model import ProviderConfig
from gateway.config.transport import PoolLimits
from gateway.providers.upstreams import upstream_pool
from gateway.upstream.connection import _READ_HIGH_WATER, MAX_HEAD_BYTES
from gateway.upstream.errors import ErrorClass, ProviderError
from gateway.upstream.http1 import Http1Client
from gateway.upstream.pool import UpstreamRequest
from gateway.upstream.sse import MAX_EVENT_BYTES, SSEDecoder
from tests.upstream.hostile import (
    BODY,
    HEADERS,
    Server,
    answer_before_the_body,
    answer_once,
    client,
    endless,
    keep_answering,
    never_reads_the_body,
    reset_after,
    response,
    with_limits,
    with_timeouts,
)

LIMIT = 1024 * 1024
PROMPTLY_S = 5.0  # far below the 30 s read timeouts used here: the failure came from the limit or rule under test
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def bounded_client(**overrides: object) -> Http1Client:
    options: dict[str, object] = {"timeouts": with_timeouts(read=30.0), "limits": with_limits(max_response_bytes=LIMIT)}
    options.update(overrides)
    return client(**options)


async def fails_within_memory(call: Awaitable[object], error_class: ErrorClass = ErrorClass.INVALID_RESPONSE
                              ) -> ProviderError:
    tracemalloc.start()
    try:
        with pytest.raises(ProviderError) as caught:
            await call
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * LIMIT, f"peak {peak} bytes"
    assert caught.value.error_class is error_class, caught.value
    return caught.value


async def still_healthy(http: Http1Client) -> None:
    """The failure left no slot taken, and the client serves the next request normally."""
    assert http._in_use == 0 and not http._queue
    async with Server(keep_answering) as healthy:
        assert (await http.post(healthy.url, HEADERS, BODY))[2] == b'{"ok":true}'
    http.close()


async def test_an_endless_response_head_is_cut_off() -> None:
    async with Server(endless(b"HTTP/1.1 200 OK\r\nX-Pad: ", b"a" * 65536)) as server:
        http = bounded_client()
        error = await fails_within_memory(http.post(server.url, HEADERS, BODY))
        assert "head is larger than" in error.message and error.responded
        await still_healthy(http)


async def test_a_head_of_many_headers_over_the_limit_fails_even_when_it_ends() -> None:
    many = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 100) for i in range(MAX_HEAD_BYTES // 100 + 10))
    async with Server(answer_once(b"HTTP/1.1 200 OK\r\n" + many + b"Content-Length: 2\r\n\r\n{}", hold_s=1)) as server:
        http = bounded_client()
        error = await fails_within_memory(http.post(server.url, HEADERS, BODY))
        assert "head is larger than" in error.message
        await still_healthy(http)


async def test_endless_informational_heads_are_cut_off() -> None:
    async with Server(endless(b"", b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n")) as server:
        http = bounded_client()
        await fails_within_memory(http.post(server.url, HEADERS, BODY))
        await still_healthy(http)


@pytest.mark.parametrize("head", [b"HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\n\r\n", CHUNKED_HEAD])
async def test_an_endless_body_fails_at_max_response_bytes(head: bytes) -> None:
    piece = b"x" * 65536
    if head == CHUNKED_HEAD:
        piece = b"%x\r\n%s\r\n" % (len(piece), piece)
    async with Server(endless(head, piece)) as server:
        http = bounded_client()
        error = await fails_within_memory(http.post(server.url, HEADERS, BODY))
        assert f"larger than max_response_bytes ({LIMIT})" in error.message
        await still_healthy(http)


async def test_a_stream_fails_once_its_accumulated_size_passes_the_limit() -> None:
    event = b"data: " + b"z" * 1000 + b"\n\n"
    async with Server(endless(CHUNKED_HEAD, b"%x\r\n%s\r\n" % (len(event), event))) as server:
        http = bounded_client()
        conn = await http.open_stream(server.url, HEADERS, BODY)
        received = 0

        async def consume() -> None:
            nonlocal received
            while chunk := await conn.read_some():  # a reader that keeps up: nothing piles up unread
                received += len(chunk)

        await fails_within_memory(consume())
        # What arrived but was still unread when the limit struck is dropped with the connection; the
        # socket pauses once that much piles up, so a lagging reader (a loaded machine) misses at most it.
        assert LIMIT - 2 * _READ_HIGH_WATER < received <= LIMIT
        http.release(conn)
        await still_healthy(http)


@pytest.fixture(scope="module")
def bombs() -> dict[bytes, bytes]:
    zeros = b"\0" * (64 * LIMIT)  # 64 MiB that compress to ~64 KiB
    raw = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return {b"gzip": gzip.compress(zeros, 9), b"deflate": zlib.compress(zeros, 9),
            b"raw-deflate": raw.compress(zeros) + raw.flush()}


@pytest.mark.slow
@pytest.mark.parametrize("kind", [b"gzip", b"deflate", b"raw-deflate"])
async def test_a_compression_bomb_stops_at_the_limit(bombs: dict[bytes, bytes], kind: bytes) -> None:
    coding = b"deflate" if kind == b"raw-deflate" else kind
    bomb = bombs[kind]
    assert len(bomb) < LIMIT // 4
    async with Server(answer_once(response(bomb, extra=b"Content-Encoding: " + coding + b"\r\n"), hold_s=1)) as server:
        http = bounded_client()
        error = await fails_within_memory(http.post(server.url, HEADERS, BODY))
        assert "larger than max_response_bytes" in error.message
        await still_healthy(http)


def compressed(kind: str, payload: bytes) -> bytes:
    if kind == "gzip":
        return gzip.compress(payload)
    if kind == "deflate":
        return zlib.compress(payload)
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return raw.compress(payload) + raw.flush()


PAYLOAD = b'{"text":"' + b"the same words again " * 500 + b'"}'


@pytest.mark.parametrize("kind", ["deflate", "raw"])
async def test_deflate_is_decoded_with_or_without_its_zlib_header(kind: str) -> None:
    body = compressed(kind, PAYLOAD)
    async with Server(answer_once(response(body, extra=b"Content-Encoding: deflate\r\n"), hold_s=1)) as server:
        http = bounded_client()
        assert (await http.post(server.url, HEADERS, BODY))[2] == PAYLOAD
        http.close()


def framed(kind: str, body: bytes, framing: str) -> bytes:
    coding = b"Content-Encoding: " + (b"gzip" if kind == "gzip" else b"deflate") + b"\r\n"
    if framing == "length":
        return b"HTTP/1.1 200 OK\r\n" + coding + b"Content-Length: %d\r\n\r\n" % len(body) + body
    if framing == "chunked":
        return b"HTTP/1.1 200 OK\r\n" + coding + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (
            len(body), body)
    return b"HTTP/1.1 200 OK\r\n" + coding + b"Connection: close\r\n\r\n" + body


@pytest.mark.parametrize("kind", ["gzip", "deflate", "raw"])
@pytest.mark.parametrize("framing", ["length", "chunked", "close"])
async def test_a_truncated_compressed_body_is_an_error_never_a_200(kind: str, framing: str) -> None:
    whole = compressed(kind, PAYLOAD)
    async with Server(answer_once(framed(kind, whole[: len(whole) // 2], framing))) as server:
        http = bounded_client()
        error = await fails_within_memory(http.post(server.url, HEADERS, BODY))
        assert "truncated compressed body" in error.message and error.responded
        await still_healthy(http)
    async with Server(answer_once(framed(kind, whole, framing))) as server:  # the whole body is fine
        http = bounded_client()
        assert (await http.post(server.url, HEADERS, BODY))[2] == PAYLOAD
        http.close()


async def test_a_reset_during_a_close_delimited_body_is_an_error() -> None:
    async with Server(reset_after(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", b'{"partial":')) as server:
        http = bounded_client()
        error = await fails_within_memory(http.post(server.url, HEADERS, BODY), ErrorClass.CONNECTION)
        assert error.responded
        await still_healthy(http)


@pytest.mark.parametrize("status", [b"413 Payload Too Large", b"400 Bad Request"])
async def test_an_early_answer_to_a_large_body_never_goes_back_to_the_pool(status: bytes) -> None:
    big = b"b" * (32 * 1024 * 1024)  # far more than the socket buffers take while the server is not reading
    early = b"HTTP/1.1 " + status + b"\r\nContent-Length: 0\r\n\r\n"
    async with Server(answer_before_the_body(early, keep_answering)) as server:
        http = bounded_client(limits=with_limits(max_connections=1, max_response_bytes=LIMIT))
        assert (await http.post(server.url, HEADERS, big))[0] == int(status[:3])
        started = time.monotonic()
        assert (await http.post(server.url, HEADERS, BODY))[2] == b'{"ok":true}'  # promptly, on a new connection
        assert time.monotonic() - started < PROMPTLY_S
        assert server.connections == 2
        http.close()


async def test_a_413_after_the_whole_body_is_not_reused_either() -> None:
    too_large = response(b'{"error":"too large"}', "413 Payload Too Large")
    async with Server(answer_once(too_large, hold_s=5)) as first, Server(keep_answering) as second:
        http = bounded_client()
        assert (await http.post(first.url, HEADERS, BODY))[0] == 413
        assert not any(http._idle.values())
        assert (await http.post(second.url, HEADERS, BODY))[0] == 200
        http.close()


@pytest.mark.slow
async def test_a_peer_that_stops_reading_the_body_hits_the_write_timeout() -> None:
    big = b"b" * (32 * 1024 * 1024)
    async with Server(never_reads_the_body) as server:
        http = bounded_client(timeouts=with_timeouts(read=30.0, write=0.3))
        started = time.monotonic()
        with pytest.raises(ProviderError) as caught:  # (memory here is the request's own body)
            await http.post(server.url, HEADERS, big)
        assert time.monotonic() - started < PROMPTLY_S
        error = caught.value
        assert error.error_class is ErrorClass.TIMEOUT and not error.responded
        assert "stopped reading the request" in error.message
        await still_healthy(http)


@pytest.mark.slow
async def test_a_slow_reader_of_a_large_body_is_not_a_write_timeout() -> None:
    big = b"s" * (8 * 1024 * 1024)

    async def slow_reader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        while length:
            length -= len(await reader.read(min(length, 256 * 1024)))
            await asyncio.sleep(0.02)  # ~12 MB/s: the whole body takes longer than the write timeout
        writer.write(response(b"{}"))
        await writer.drain()

    async with Server(slow_reader) as server:
        http = client(timeouts=with_timeouts(read=30.0, write=0.25))
        assert (await http.post(server.url, HEADERS, big))[0] == 200
        http.close()


async def test_the_wait_for_a_free_connection_is_bounded_by_the_pool_timeout() -> None:
    async with Server(answer_once(hold_s=10)) as server:
        http = client(timeouts=with_timeouts(read=30.0, pool=0.3), limits=with_limits(max_connections=1))
        busy = asyncio.create_task(http.post(server.url, HEADERS, BODY))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        with pytest.raises(ProviderError) as caught:
            await http.post(server.url, HEADERS, BODY)  # no deadline: the pool timeout alone ends it
        assert time.monotonic() - started < PROMPTLY_S
        assert caught.value.error_class is ErrorClass.TIMEOUT and not caught.value.responded
        busy.cancel()
        with pytest.raises(asyncio.CancelledError):
            await busy
        assert http._in_use == 0 and not http._queue
        http.close()


async def test_idle_connections_past_the_idle_timeout_are_not_reused() -> None:
    async with Server(keep_answering) as server:  # keeps every connection open for as long as the client does
        http = client(limits=with_limits(keepalive_expiry=0.1))
        assert (await http.post(server.url, HEADERS, BODY))[0] == 200
        assert (await http.post(server.url, HEADERS, BODY))[0] == 200
        assert server.connections == 1  # reused while fresh
        await asyncio.sleep(0.2)
        assert (await http.post(server.url, HEADERS, BODY))[0] == 200
        assert server.connections == 2
        assert len(http._open) == 1  # the stale one was closed, not kept
        http.close()


async def test_an_idle_timeout_of_zero_never_reuses() -> None:
    async with Server(keep_answering) as server:
        http = client(limits=with_limits(keepalive_expiry=0))
        for _ in range(2):
            assert (await http.post(server.url, HEADERS, BODY))[0] == 200
        assert server.connections == 2 and not http._open and not any(http._idle.values())
        http.close()


def test_an_sse_line_or_event_past_the_bound_fails_the_stream() -> None:
    decoder = SSEDecoder()
    piece = b"x" * 65536
    with pytest.raises(ProviderError) as caught:
        decoder.feed(b"data: ")
        for _ in range(MAX_EVENT_BYTES // len(piece) + 2):  # one line that never ends
            decoder.feed(piece)
    assert caught.value.error_class is ErrorClass.INVALID_RESPONSE
    decoder = SSEDecoder()
    with pytest.raises(ProviderError):  # many short data lines of one event that never ends
        for _ in range(MAX_EVENT_BYTES // 1000 + 2):
            decoder.feed(b"data: " + b"y" * 1000 + b"\n")
    decoder = SSEDecoder()  # events under the bound pass, however many
    for _ in range(10):
        assert [e.data for e in decoder.feed(b"data: " + b"y" * 1000 + b"\n\n")] == [b"y" * 1000]


async def test_the_pool_applies_each_providers_max_response_bytes() -> None:
    async with Server(endless(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\n\r\n", b"p" * 65536)) as server:
        provider = ProviderConfig(name="p", type="openai", base_url=f"http://127.0.0.1:{server.port}",
                                  limits=PoolLimits(max_response_bytes=LIMIT))
        pool = upstream_pool({"p": provider})
        error = await fails_within_memory(pool.post("p", UpstreamRequest(server.url, dict(HEADERS), BODY),
                                                    time.monotonic() + 30))
        assert f"({LIMIT})" in error.message
        await pool.aclose()
