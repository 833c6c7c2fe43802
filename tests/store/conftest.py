"""Fixtures: one behavioural suite, run against every store implementation.

Redis tests use a real server (``LOOPGATE_TEST_REDIS_URL``, default db 15 on localhost), flushed
before and after each test. Each Redis test holds an exclusive file lock for that URL, so two
test runs on one machine (two checkouts, an editor's runner) interleave instead of flushing
each other's keys mid-test. Without a reachable Redis, Redis tests skip with the reason, except under
``CI=true``, where they fail: CI must never pass by silently not testing the production store.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.store.base import Store
from gateway.store.memory import MemoryStore
from gateway.store.redis import RedisStore

REDIS_URL = os.environ.get("LOOPGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
IN_CI = os.environ.get("CI", "").strip().lower() == "true"

StoreFactory = Callable[..., Awaitable[Store]]


@contextmanager
def _exclusive_redis_db() -> Iterator[None]:
    name = hashlib.sha1(REDIS_URL.encode()).hexdigest()[:12]
    path = os.path.join(tempfile.gettempdir(), f"loopgate-test-redis-{name}.lock")
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # blocks only while another run is inside a Redis test
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


async def _flush_redis() -> None:
    client = aioredis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=3)
    try:
        await client.flushdb()
    finally:
        await client.aclose()


async def require_redis() -> None:
    """Skip (locally) or fail (under CI=true) when the test Redis cannot be reached."""
    probe = RedisStore(REDIS_URL)
    try:
        reachable = await probe.ping()
    finally:
        await probe.aclose()
    if not reachable:
        reason = f"Redis not reachable at {REDIS_URL} (set LOOPGATE_TEST_REDIS_URL or start redis-server)"
        if IN_CI:
            pytest.fail(f"{reason}; CI=true, so Redis tests must run, not skip")
        pytest.skip(reason)


@pytest.fixture(params=["memory", "redis"])
async def store_factory(request: pytest.FixtureRequest) -> AsyncIterator[StoreFactory]:
    """Builds stores of the parametrised kind (several may share state: Redis replicas); closes them all."""
    if request.param == "redis":
        await require_redis()
        with _exclusive_redis_db():
            await _flush_redis()
            async with _factory("redis") as make:
                yield make
            await _flush_redis()
    else:
        async with _factory("memory") as make:
            yield make


@asynccontextmanager
async def _factory(kind: str) -> AsyncIterator[StoreFactory]:
    made: list[Store] = []
    shared_memory: list[MemoryStore] = []

    async def make(**options: Any) -> Store:
        s: Store
        if kind == "redis":
            s = RedisStore(REDIS_URL, **options)
        elif not options and shared_memory:
            # "Replicas" of the embedded store are one object: it is a single process by definition.
            return shared_memory[0]
        else:
            mem = MemoryStore(**options)
            if not options:
                shared_memory.append(mem)
            s = mem
        made.append(s)
        return s

    try:
        yield make
    finally:
        for s in made:
            await s.aclose()


@pytest.fixture
async def store(store_factory: StoreFactory) -> Store:
    return await store_factory()


@pytest.fixture
def redis_url() -> str:
    return REDIS_URL


@pytest.fixture
async def redis_raw() -> AsyncIterator[aioredis.Redis]:
    """A plain client on the (flushed, locked) test database, for inspecting keys and TTLs."""
    await require_redis()
    with _exclusive_redis_db():
        await _flush_redis()
        client = aioredis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=3)
        try:
            yield client
        finally:
            await client.aclose()
            await _flush_redis()
