"""Every upstream exchange ends by the request's deadline, whichever wait it is in.

A deadline is an absolute ``time.monotonic()`` instant; read timeouts stay per read, so an
upstream that keeps every gap short but never finishes is stopped only by the deadline.
"""

from __future__ import annotations

import asyncio
import ssl
import time

import pytest

from gateway.canonical import ModelRequest
from gateway.config.model import ProviderConfig, RoutingConfig, TargetConfig
from gateway.config.transport import Timeouts
from gateway.providers.upstreams import upstream_pool
from gateway.routing.health import TargetHealth
from gateway.routing.router import AllTargetsFailed, Router
from gateway.upstream.errors import ErrorClass, ProviderError
from gateway.upstream.pool import UpstreamPool, UpstreamRequest
from tests.upstream.hostile import BODY, HEADERS, Server, answer_once, client, drip, silent, with_limits, with_timeouts

# Far beyond the deadlines below: a failure inside this bound proves the deadline ended the
# wait, not a read or connect timeout (those are set to 30 s and more).
PROMPTLY_S = 3.0

CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"


async def fails_by_deadline(call: asyncio.Future[object] | object, started: float) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await call  # type: ignore[misc]
    assert time.monotonic() - started < PROMPTLY_S
    assert caught.value.error_class is ErrorClass.TIMEOUT
    return caught.value


async def test_a_dripping_body_fails_at_the_deadline_not_after() -> None:
    async with Server(drip(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")) as server:
        http = client(timeouts=with_timeouts(read=30))
        started = time.monotonic()
        error = await fails_by_deadline(http.post(server.url, HEADERS, BODY, started + 0.4), started)
        assert error.responded  # the head had arrived
        assert "deadline" in error.message
        assert http._in_use == 0 and not any(http._idle.values())
        http.close()


async def test_a_stream_read_fails_at_the_deadline() -> None:
    async with Server(drip(CHUNKED_HEAD + b"5\r\n: hi\n\r\n", byte=b"")) as server:  # then nothing, ever
        http = client(timeouts=with_timeouts(read=30))
        started = time.monotonic()
        conn = await http.open_stream(server.url, HEADERS, BODY, started + 0.4)
        assert await conn.read_some() == b": hi\n"
        error = await fails_by_deadline(conn.read_some(), started)
        assert error.responded
        http.release(conn)
        http.close()


async def test_a_head_that_never_comes_fails_at_the_deadline_with_nothing_received() -> None:
    async with Server(answer_once(hold_s=10)) as server:
        http = client(timeouts=with_timeouts(read=30))
        started = time.monotonic()
        error = await fails_by_deadline(http.post(server.url, HEADERS, BODY, started + 0.3), started)
        assert not error.responded
        http.close()


async def test_the_wait_for_a_free_connection_ends_at_the_deadline() -> None:
    async with Server(answer_once(hold_s=10)) as server:
        http = client(timeouts=with_timeouts(read=30), limits=with_limits(max_connections=1))
        busy = asyncio.create_task(http.post(server.url, HEADERS, BODY))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        error = await fails_by_deadline(http.post(server.url, HEADERS, BODY, started + 0.3), started)
        assert not error.responded and "no upstream connection became free" in error.message
        assert http.stats() == (1, 0, 0)  # the busy call still holds the slot; nobody is left queued
        busy.cancel()
        with pytest.raises(asyncio.CancelledError):
            await busy
        assert http._in_use == 0 and not http._queue
        http.close()


async def test_connecting_ends_at_the_deadline() -> None:
    async with Server(silent) as server:  # the TLS handshake never completes
        http = client(timeouts=with_timeouts(connect=30), tls=ssl.create_default_context())
        started = time.monotonic()
        error = await fails_by_deadline(http.post(f"https://127.0.0.1:{server.port}/x", HEADERS, BODY,
                                                  started + 0.3), started)
        assert not error.responded
        assert http._in_use == 0
        http.close()


def provider(url: str, timeout_s: float = 30.0) -> ProviderConfig:
    return ProviderConfig(name="dripping", type="openai", base_url=url, timeouts=Timeouts(read=timeout_s))


@pytest.mark.slow
async def test_the_pool_passes_the_deadline_to_posts_and_streams() -> None:
    async with Server(drip(CHUNKED_HEAD, byte=b"1\r\n \r\n")) as server:
        pool = upstream_pool({"dripping": provider(f"http://127.0.0.1:{server.port}/v1")})
        request = UpstreamRequest(server.url, dict(HEADERS), BODY)
        started = time.monotonic()
        await fails_by_deadline(pool.post("dripping", request, started + 0.3), started)
        started = time.monotonic()
        with pytest.raises(ProviderError) as caught:
            async with pool.stream("dripping", request, started + 0.3) as upstream:
                async for _ in upstream.chunks():
                    pass
        assert caught.value.error_class is ErrorClass.TIMEOUT and caught.value.responded
        assert time.monotonic() - started < PROMPTLY_S
        await pool.aclose()


def routed(url: str, timeout_s: float) -> tuple[Router, UpstreamPool]:
    providers = {"dripping": provider(url, timeout_s)}
    pool = upstream_pool(providers)
    return Router(providers, RoutingConfig(), pool, TargetHealth(3, 30.0)), pool


REQUEST = ModelRequest(messages=[{"role": "user", "content": "hi"}])


@pytest.mark.slow
async def test_a_routed_call_to_a_dripping_upstream_ends_at_the_request_deadline() -> None:
    # Each gap (0.05 s) is inside the provider's read timeout (0.3 s), which is shorter than the
    # time left: only the deadline can end this call.
    async with Server(drip(CHUNKED_HEAD, byte=b"1\r\n \r\n")) as server:
        router, pool = routed(f"http://127.0.0.1:{server.port}/v1", timeout_s=0.3)
        targets = router.resolve([TargetConfig("dripping", "m")])
        started = time.monotonic()
        with pytest.raises(AllTargetsFailed) as caught:
            await router.complete(targets, REQUEST, [], retries=2, deadline=started + 0.8)
        assert caught.value.last.error_class is ErrorClass.TIMEOUT
        assert time.monotonic() - started < PROMPTLY_S
        await pool.aclose()


async def test_a_routed_stream_that_stalls_ends_at_the_request_deadline() -> None:
    stalls = drip(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"5\r\n: hi\n\r\n", byte=b"")
    async with Server(stalls) as server:
        router, pool = routed(f"http://127.0.0.1:{server.port}/v1", timeout_s=30.0)
        targets = router.resolve([TargetConfig("dripping", "m")])
        started = time.monotonic()
        with pytest.raises(AllTargetsFailed) as caught:
            async for _ in router.stream(targets, REQUEST, [], retries=0, deadline=started + 0.4):
                pass
        assert caught.value.last.error_class is ErrorClass.TIMEOUT
        assert time.monotonic() - started < PROMPTLY_S
        await pool.aclose()
