"""The lean upstream HTTP/1.1 client against a scripted raw TCP server on 127.0.0.1.

The server is a real socket server (asyncio streams), so framing, keep-alive, timeouts and
connection handling are exercised exactly as with a provider; each test scripts the bytes
the server answers with.
"""

from __future__ import annotations

import asyncio
import gzip
import ssl
import subprocess
import time
from pathlib import Path

import pytest

from gateway.providers.base import ErrorClass, ProviderError
from gateway.upstream.http1 import parse_url
from tests.upstream.hostile import (
    BODY,
    HEADERS,
    Server,
    answer_once,
    answering_after,
    client,
    keep_answering,
    response,
    with_limits,
    with_timeouts,
)


async def test_request_head_and_body_are_sent_as_written() -> None:
    async with Server(keep_answering) as server:
        http = client()
        status, headers, body = await http.post(server.url + "?alt=sse", HEADERS, BODY)
        assert (status, body, headers["Content-Type"]) == (200, b'{"ok":true}', "application/json")
        head, sent = server.requests[0]
        lines = head.decode().split("\r\n")
        assert lines[0] == "POST /v1/chat/completions?alt=sse HTTP/1.1"
        assert f"Host: 127.0.0.1:{server.port}" in lines
        assert {"User-Agent: loopgate-test", "content-type: application/json",
                "authorization: Bearer sk-test", f"Content-Length: {len(BODY)}"} <= set(lines)
        assert sent == BODY
        http.close()


async def test_keep_alive_reuses_one_connection() -> None:
    async with Server(keep_answering) as server:
        http = client()
        for _ in range(5):
            assert (await http.post(server.url, HEADERS, BODY))[0] == 200
        assert server.connections == 1
        http.close()


async def test_chunked_body_is_decoded_and_the_connection_reused() -> None:
    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        while await server.read_request(reader) is not None:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for part in (b'{"a":', b'"chunked"}'):
                writer.write(b"%x\r\n%s\r\n" % (len(part), part))
                await writer.drain()
                await asyncio.sleep(0.01)
            writer.write(b"0\r\n\r\n")

    async with Server(chunked) as server:
        http = client()
        for _ in range(2):
            status, _, body = await http.post(server.url, HEADERS, BODY)
            assert (status, body) == (200, b'{"a":"chunked"}')
        assert server.connections == 1
        http.close()


async def test_body_delimited_by_close_is_read_to_the_end_and_not_reused() -> None:
    until_close = answer_once(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{\"until\":", b'"eof"}', pause_s=0.01)
    async with Server(until_close) as server:
        http = client()
        for _ in range(2):
            assert (await http.post(server.url, HEADERS, BODY))[2] == b'{"until":"eof"}'
        assert server.connections == 2
        http.close()


async def test_gzip_body_is_decompressed() -> None:
    payload = b'{"text":"' + b"compressible " * 200 + b'"}'

    async def gzipped(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        while await server.read_request(reader) is not None:
            writer.write(response(gzip.compress(payload), extra=b"Content-Encoding: gzip\r\n"))

    async with Server(gzipped) as server:
        http = client()
        assert (await http.post(server.url, HEADERS, BODY))[2] == payload
        assert b"Accept-Encoding" not in server.requests[0][0]  # only what extra_head asks for
        http.close()


async def test_informational_response_is_skipped() -> None:
    early_hints = answer_once(b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
                              + response(b"{}", extra=b"X-Final: yes\r\n"))
    async with Server(early_hints) as server:
        http = client()
        status, headers, body = await http.post(server.url, HEADERS, BODY)
        assert (status, headers.get("x-final"), "link" in headers, body) == (200, "yes", False, b"{}")
        http.close()


async def test_error_status_keeps_headers_case_insensitive() -> None:
    limited = answer_once(response(b'{"error":{}}', "429 Too Many Requests", b"Retry-After: 7\r\nX-A: 1\r\nX-A: 2\r\n"))
    async with Server(limited) as server:
        http = client()
        status, headers, _ = await http.post(server.url, HEADERS, BODY)
        assert (status, headers["retry-after"], headers.get("RETRY-AFTER"), headers["x-a"]) == (429, "7", "7", "1, 2")
        http.close()


async def test_connection_refused_is_a_connection_error() -> None:
    async with Server(keep_answering) as server:
        url = server.url
    await asyncio.sleep(0.05)
    with pytest.raises(ProviderError) as caught:
        await client().post(url, HEADERS, BODY)
    assert caught.value.error_class is ErrorClass.CONNECTION
    assert "cannot connect to upstream" in caught.value.message


async def test_silent_server_hits_the_read_timeout_and_frees_the_slot() -> None:
    async with Server(answer_once(hold_s=5)) as server:  # reads the request, never answers
        http = client(timeouts=with_timeouts(read=0.2), limits=with_limits(max_connections=1))
        with pytest.raises(ProviderError) as caught:
            await http.post(server.url, HEADERS, BODY)
        assert caught.value.error_class is ErrorClass.TIMEOUT
        with pytest.raises(ProviderError):  # the one slot was given back: a second call gets as far
            await http.post(server.url, HEADERS, BODY)
        assert server.connections == 2  # the timed-out connection was not reused
        http.close()


@pytest.mark.slow
async def test_read_timeout_is_per_read_not_for_the_whole_body() -> None:
    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(6):  # 6 x 0.1 s: longer than the 0.25 s timeout in total, never per gap
            await asyncio.sleep(0.1)
            writer.write(b"1\r\nx\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with Server(trickle) as server:
        http = client(timeouts=with_timeouts(read=0.25))
        assert (await http.post(server.url, HEADERS, BODY))[2] == b"xxxxxx"
        http.close()


async def test_headers_timeout_of_a_stream() -> None:
    async with Server(answer_once(hold_s=5)) as server:  # no response head in time
        http = client(timeouts=with_timeouts(read=30))
        started = asyncio.get_running_loop().time()
        with pytest.raises(ProviderError) as caught:
            await http.open_stream(server.url, HEADERS, BODY, deadline=time.monotonic() + 0.2)
        assert caught.value.error_class is ErrorClass.TIMEOUT
        assert asyncio.get_running_loop().time() - started < 2
        http.close()


async def test_connection_closed_mid_body_is_a_connection_error() -> None:
    async with Server(answer_once(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"partial")) as server:
        with pytest.raises(ProviderError) as caught:
            await client().post(server.url, HEADERS, BODY)
        assert caught.value.error_class is ErrorClass.CONNECTION
        assert "mid-response" in caught.value.message


async def test_invalid_http_is_an_invalid_response() -> None:
    async with Server(answer_once(b"SMTP ready\r\n\r\n", hold_s=1)) as server:
        with pytest.raises(ProviderError) as caught:
            await client().post(server.url, HEADERS, BODY)
        assert caught.value.error_class is ErrorClass.INVALID_RESPONSE


async def test_idle_connection_closed_by_the_server_is_not_reused() -> None:
    async with Server(answer_once(response(b"{}"))) as server:  # says keep-alive, then closes while idle
        http = client()
        assert (await http.post(server.url, HEADERS, BODY))[0] == 200
        await asyncio.sleep(0.05)  # the server's FIN arrives while the connection is idle
        assert (await http.post(server.url, HEADERS, BODY))[0] == 200
        assert server.connections == 2
        http.close()


async def test_concurrency_is_capped_at_the_limit_and_waiters_are_served_in_turn() -> None:
    async with Server(answering_after(0.02)) as server:
        http = client(limits=with_limits(max_connections=2))
        calls = [asyncio.create_task(http.post(server.url, HEADERS, BODY)) for _ in range(8)]
        await asyncio.sleep(0.01)
        assert http.stats() == (2, 0, 6)  # two in flight, six queued for a connection
        results = await asyncio.gather(*calls)
        assert http.stats() == (0, 2, 0)
        assert [r[0] for r in results] == [200] * 8
        assert server.most_open <= 2 and server.connections == 2
        assert http._in_use == 0 and not http._queue
        http.close()


async def test_a_cancelled_waiter_gives_its_turn_away() -> None:
    async with Server(answering_after(0.1)) as server:
        http = client(limits=with_limits(max_connections=1))
        first = asyncio.create_task(http.post(server.url, HEADERS, BODY))
        await asyncio.sleep(0.02)
        queued = asyncio.create_task(http.post(server.url, HEADERS, BODY))
        third = asyncio.create_task(http.post(server.url, HEADERS, BODY))
        await asyncio.sleep(0.02)
        queued.cancel()
        assert (await first)[0] == 200 and (await third)[0] == 200
        with pytest.raises(asyncio.CancelledError):
            await queued
        assert http._in_use == 0 and not http._queue
        http.close()


async def test_a_cancelled_exchange_closes_its_connection() -> None:
    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await server.read_request(reader)
        try:
            await reader.read()  # EOF once the client drops the connection
        finally:
            server.closed_by_peer.set()

    async with Server(slow) as server:
        http = client()
        task = asyncio.create_task(http.post(server.url, HEADERS, BODY))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(server.closed_by_peer.wait(), 2)
        assert http._in_use == 0
        http.close()


async def test_stream_delivers_chunks_as_they_arrive_and_abandoning_it_closes_the_connection() -> None:
    gate = asyncio.Event()

    async def sse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"9\r\ndata: 1\n\n\r\n")
        await writer.drain()
        await gate.wait()
        try:
            await reader.read()
        finally:
            server.closed_by_peer.set()

    async with Server(sse) as server:
        http = client()
        conn = await http.open_stream(server.url, HEADERS, BODY)
        assert conn.status == 200
        assert await conn.read_some() == b"data: 1\n\n"  # before the body is complete
        gate.set()
        http.release(conn)  # mid-body: must not go back to the pool
        await asyncio.wait_for(server.closed_by_peer.wait(), 2)
        assert http._in_use == 0 and not any(http._idle.values())
        http.close()


async def test_a_large_stream_read_slowly_arrives_whole() -> None:
    piece = b"y" * 65536
    count = 40  # 2.5 MB: well past the read-pause threshold

    async def big(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (len(piece) * count))
        for _ in range(count):
            writer.write(piece)
            await writer.drain()
        await reader.read()  # keep the connection open: the client may keep it

    async with Server(big) as server:
        http = client()
        conn = await http.open_stream(server.url, HEADERS, BODY)
        received = 0
        while chunk := await conn.read_some():
            received += len(chunk)
            await asyncio.sleep(0.001)
        assert received == len(piece) * count
        http.release(conn)
        assert sum(len(v) for v in http._idle.values()) == 1  # complete: kept for reuse
        http.close()


async def test_a_line_break_in_a_header_is_refused_before_sending() -> None:
    async with Server(keep_answering) as server:
        http = client()
        with pytest.raises(ProviderError) as caught:
            await http.post(server.url, {"x-custom": "a\r\nInjected: yes"}, BODY)
        assert caught.value.error_class is ErrorClass.AUTH
        assert server.connections == 0
        http.close()


def test_url_parsing() -> None:
    origin = parse_url("https://api.example.com/v1/chat/completions")
    assert (origin.host, origin.port, origin.tls) == ("api.example.com", 443, True)
    assert origin.head == "POST /v1/chat/completions HTTP/1.1\r\nHost: api.example.com\r\n"
    origin = parse_url("http://[::1]:8080/x?key=1")
    assert (origin.host, origin.port, origin.tls) == ("::1", 8080, False)
    assert origin.head == "POST /x?key=1 HTTP/1.1\r\nHost: [::1]:8080\r\n"
    for bad in ("ftp://h/x", "http:///x", "http://h:notaport/x"):
        with pytest.raises(ProviderError):
            parse_url(bad)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


async def test_tls_with_verification(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    server = await asyncio.start_server(
        lambda r, w: keep_answering(r, w, Server(keep_answering)), "127.0.0.1", 0, ssl=server_tls)
    port = server.sockets[0].getsockname()[1]
    try:
        trusting = ssl.create_default_context(cafile=str(cert))
        http = client(tls=trusting)
        status, _, body = await http.post(f"https://localhost:{port}/v1/x", HEADERS, BODY)
        assert (status, body) == (200, b'{"ok":true}')
        http.close()
        with pytest.raises(ProviderError) as caught:  # the system trust store does not know the cert
            await client(tls=ssl.create_default_context()).post(f"https://localhost:{port}/v1/x", HEADERS, BODY)
        assert caught.value.error_class is ErrorClass.CONNECTION
    finally:
        server.close()


async def test_tls_body_delimited_by_a_clean_close_is_complete(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    until_close = answer_once(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{\"until\":", b'"eof"}', pause_s=0.01)
    async with Server(until_close) as plain:
        # The scripted handler over TLS: it closes with close_notify, then FIN.
        server = await asyncio.start_server(lambda r, w: plain._track(r, w), "127.0.0.1", 0, ssl=server_tls)
        port = server.sockets[0].getsockname()[1]
        try:
            http = client(tls=ssl.create_default_context(cafile=str(cert)))
            status, _, body = await http.post(f"https://localhost:{port}/v1/x", HEADERS, BODY)
            assert (status, body) == (200, b'{"until":"eof"}')
            http.close()
        finally:
            server.close()


async def test_tls_handshake_that_never_completes_hits_the_connect_timeout() -> None:
    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await asyncio.sleep(5)

    async with Server(mute) as server:
        http = client(timeouts=with_timeouts(connect=0.2), tls=ssl.create_default_context())
        with pytest.raises(ProviderError) as caught:
            await http.post(f"https://127.0.0.1:{server.port}/x", HEADERS, BODY)
        assert caught.value.error_class is ErrorClass.TIMEOUT
        assert http._in_use == 0
        http.close()


async def test_idle_connections_the_server_closed_are_swept_not_kept() -> None:
    async def first_closes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        closes = server.connections == 1
        while await server.read_request(reader) is not None:
            await asyncio.sleep(0.02)  # both requests in flight together: two connections
            writer.write(response(b"{}"))
            await writer.drain()
            if closes:
                return

    async with Server(first_closes) as server:
        http = client()
        await asyncio.gather(http.post(server.url, HEADERS, BODY), http.post(server.url, HEADERS, BODY))
        assert server.connections == 2
        await asyncio.sleep(0.05)  # the first connection's FIN arrives while it is idle
        for _ in range(3):
            assert (await http.post(server.url, HEADERS, BODY))[0] == 200
        assert server.connections == 2  # the live one was reused, the closed one never
        assert len(http._open) == 1 and sum(len(v) for v in http._idle.values()) == 1
        http.close()


async def test_a_second_unrequested_response_is_ignored_and_the_connection_dropped() -> None:
    async def doubled(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        while await server.read_request(reader) is not None:
            writer.write(response(b'{"n":1}') + response(b'{"n":2}', "500 Internal Server Error"))
            await writer.drain()

    async with Server(doubled) as server:
        http = client()
        for _ in range(2):
            status, _, body = await http.post(server.url, HEADERS, BODY)
            assert (status, body) == (200, b'{"n":1}')
        assert server.connections == 2  # the first connection was not trusted again
        http.close()


async def test_unsolicited_bytes_on_an_idle_connection_retire_it() -> None:
    sent = asyncio.Event()

    async def chatty(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        while await server.read_request(reader) is not None:
            writer.write(response(b"{}"))
            await writer.drain()
            await asyncio.sleep(0.01)
            writer.write(b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            sent.set()

    async with Server(chatty) as server:
        http = client()
        assert (await http.post(server.url, HEADERS, BODY))[0] == 200
        await asyncio.wait_for(sent.wait(), 10)  # the 408 is written (a busy machine may take longer than 50 ms)
        await asyncio.sleep(0.05)  # a few turns of this loop: the client's connection reads the bytes
        assert (await http.post(server.url, HEADERS, BODY))[0] == 200  # on a new connection
        assert server.connections == 2
        http.close()


async def test_a_large_error_body_of_a_stream_is_read_whole() -> None:
    body = b'{"error":"' + b"e" * (1024 * 1024) + b'"}'

    async def big_error(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await server.read_request(reader)
        writer.write(response(body, "500 Internal Server Error"))
        await writer.drain()
        await reader.read()

    async with Server(big_error) as server:
        http = client(timeouts=with_timeouts(read=1.0))
        conn = await http.open_stream(server.url, HEADERS, BODY)
        await asyncio.sleep(0.1)  # let the socket fill past the pause threshold first
        assert (conn.status, await conn.read_all()) == (500, body)
        http.release(conn)
        http.close()


async def test_a_connection_left_paused_by_its_last_stream_reads_again() -> None:
    async with Server(keep_answering) as server:
        http = client(timeouts=with_timeouts(read=1.0))
        conn = await http.open_stream(server.url, HEADERS, BODY)
        assert await conn.read_all() == b'{"ok":true}'
        # The state a stream leaves when its last read crossed the pause threshold and
        # completed the body in the same read: complete (so reusable) but not reading.
        conn._transport.pause_reading()  # type: ignore[union-attr]
        conn._paused = True
        http.release(conn)
        assert (await http.post(server.url, HEADERS, BODY))[2] == b'{"ok":true}'
        assert server.connections == 1
        http.close()


@pytest.mark.parametrize(("coding", "payload", "why"), [(b"br", b"\x1b\x00", "unsupported Content-Encoding"),
                                                        (b"gzip", b"not gzip at all", "corrupt compressed body")])
async def test_undecodable_body_is_an_invalid_response(coding: bytes, payload: bytes, why: str) -> None:
    async def encoded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await server.read_request(reader)
        writer.write(response(payload, extra=b"Content-Encoding: " + coding + b"\r\n"))
        await writer.drain()
        await reader.read()

    async with Server(encoded) as server:
        http = client()
        with pytest.raises(ProviderError) as caught:
            await http.post(server.url, HEADERS, BODY)
        assert caught.value.error_class is ErrorClass.INVALID_RESPONSE and why in caught.value.message
        assert http._in_use == 0
        http.close()


async def test_a_large_request_body_arrives_whole() -> None:
    big = b'{"messages":"' + b"m" * (3 * 1024 * 1024) + b'"}'  # past the single-write size: head and body apart
    async with Server(keep_answering) as server:
        http = client()
        assert (await http.post(server.url, HEADERS, big))[0] == 200
        assert server.requests[0][1] == big
        assert (await http.post(server.url, HEADERS, BODY))[0] == 200  # and the connection is still in step
        assert server.connections == 1
        http.close()


async def test_a_host_name_the_resolver_cannot_encode_is_a_connection_error() -> None:
    http = client()
    with pytest.raises(ProviderError) as caught:  # an IDNA label over 63 characters: a UnicodeError, not an OSError
        await http.post(f"http://{'a' * 64}.example/v1/chat/completions", HEADERS, BODY)
    assert caught.value.error_class is ErrorClass.CONNECTION and not caught.value.responded
    assert http._in_use == 0
    http.close()
