"""Fixtures: one behavioural suite, run against every store implementation.

Redis tests use a real server (``LOOPGATE_TEST_REDIS_URL``, default db 15 on localhost), flushed
before and after each test. Without a reachable Redis they skip with the reason, except under
``CI=true``, where they fail: CI must never pass by silently not testing the production store.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.store.base import Store
from gateway.store.memory import MemoryStore
from gateway.store.redis import RedisStore

REDIS_URL = os.environ.get("LOOPGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
IN_CI = os.environ.get("CI", "").strip().lower() == "true"

StoreFactory = Callable[..., Awaitable[Store]]


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
    made: list[Store] = []
    if request.param == "redis":
        await require_redis()
        await _flush_redis()

    shared_memory: list[MemoryStore] = []

    async def make(**options: Any) -> Store:
        s: Store
        if request.param == "redis":
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

    yield make
    for s in made:
        await s.aclose()
    if request.param == "redis":
        await _flush_redis()


@pytest.fixture
async def store(store_factory: StoreFactory) -> Store:
    return await store_factory()


@pytest.fixture
def redis_url() -> str:
    return REDIS_URL


@pytest.fixture
async def redis_raw() -> AsyncIterator[aioredis.Redis]:
    """A plain client on the test database, for inspecting keys and TTLs."""
    await require_redis()
    await _flush_redis()
    client = aioredis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=3)
    yield client
    await client.aclose()
    await _flush_redis()
