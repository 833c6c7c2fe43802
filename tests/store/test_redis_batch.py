"""Rate-limit calls of one loop turn share one Redis round trip, with the semantics of separate calls."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.asyncio as aioredis

from gateway.store.limits.base import LimitScope
from gateway.store.limits.redis import RedisRateLimiter, scope_keys
from gateway.store.redis import RedisStore
from tests.redis_servers import PATIENT


def _count_pipelines(store: RedisStore) -> list[int]:
    """Counts the pipelines the store sends (instrumentation only: the real pipeline runs), on its lean command
    path where it has one (one server, as here), else on redis-py's client."""
    opened: list[int] = []
    sender: Any = store.io.lean if store.io.lean is not None else store.io.client
    original = sender.pipeline

    def counting(*args: Any, **kwargs: Any) -> Any:
        opened.append(1)
        return original(*args, **kwargs)

    sender.pipeline = counting
    return opened


async def test_one_turn_of_takes_is_one_pipeline_in_call_order(redis_raw: aioredis.Redis, redis_url: str) -> None:
    store = RedisStore(redis_url, **PATIENT)
    try:
        limiter = RedisRateLimiter(store.io)
        scope = LimitScope("key", "k_batch", 10, 0, 0)
        await limiter.admit("t", (scope,), 1, "warm", 60)  # loads the script; 9 left
        opened = _count_pipelines(store)
        now = time.time()
        decisions = await asyncio.gather(*(limiter.admit("t", (scope,), 1, f"m{i}", 60, now) for i in range(20)))
        assert len(opened) == 1
        assert [d.allowed for d in decisions] == [True] * 9 + [False] * 11
        assert [d.requests.remaining for d in decisions[:9] if d.requests] == list(range(8, -1, -1))
    finally:
        await store.aclose()


async def test_a_script_the_server_lost_runs_once(redis_raw: aioredis.Redis, redis_url: str) -> None:
    """After a restart the batch's loaded script ran and the lost one did not: only that one goes again."""
    store = RedisStore(redis_url, **PATIENT)
    try:
        limiter = RedisRateLimiter(store.io)
        scope = LimitScope("key", "k_lost", 10, 0, 5)
        now = time.time()
        assert (await limiter.admit("t", (scope,), 1, "m1", 60, now)).allowed
        await redis_raw.script_flush()
        await redis_raw.script_load(limiter._acquire.script)  # the take is known again, the settle is not
        first, _, third = await asyncio.gather(limiter.admit("t", (scope,), 1, "m2", 60, now),
                                               limiter.settle("t", (scope,), 0, "m1"),
                                               limiter.admit("t", (scope,), 1, "m3", 60, now))
        assert first.requests is not None and first.requests.remaining == 8
        assert third.requests is not None and third.requests.remaining == 7  # no take ran twice
        slots = scope_keys("t", scope)[1]
        assert sorted(await redis_raw.zrange(slots, 0, -1)) == [b"m2", b"m3"]  # the settle ran, once
    finally:
        await store.aclose()
