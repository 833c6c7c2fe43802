"""The usage aggregates on both stores: six rows per write, period reads for budgets, day rows, TTLs."""

from __future__ import annotations

import calendar
from collections.abc import AsyncIterator

import pytest

from gateway.store.redis import RedisStore
from gateway.store.usage.base import FIELDS, UsageDelta, UsageStore
from gateway.store.usage.memory import MemoryUsage
from gateway.store.usage.redis import RedisUsage, usage_key
from tests.ports import free_port
from tests.redis_servers import PATIENT
from tests.usage.redis_access import REDIS_URL, flushed_redis

DEC_31 = calendar.timegm((2026, 12, 31, 23, 59, 0))
JAN_1 = DEC_31 + 120


@pytest.fixture(params=["memory", "redis"])
async def usage(request: pytest.FixtureRequest) -> AsyncIterator[UsageStore]:
    if request.param == "memory":
        yield MemoryUsage()
        return
    client = await flushed_redis()
    store = RedisStore(REDIS_URL, **PATIENT)
    yield RedisUsage(store.io, retention_days=2)
    await client.flushdb()
    await client.aclose()
    await store.aclose()


def delta(prompt: int, completion: int, cost_nano: int, errors: int = 0) -> UsageDelta:
    return UsageDelta(requests=1, errors=errors, prompt_tokens=prompt, completion_tokens=completion, cached_tokens=3,
                      reasoning_tokens=2, cost_nano=cost_nano, tool_calls=1)


async def test_rows_per_day_month_and_total(usage: UsageStore) -> None:
    await usage.add("team-a", "key_1", delta(100, 10, 5_000), DEC_31)
    await usage.add("team-a", "key_2", delta(200, 20, 7_000, errors=1), DEC_31)
    await usage.add("team-a", "key_1", delta(1, 1, 1), JAN_1)

    tenant_day, key_day, tenant_month, key_total = await usage.spent(
        "team-a", "key_1", [("tenant", "day"), ("key", "day"), ("tenant", "month"), ("key", "total")], DEC_31)
    assert (tenant_day.tokens, tenant_day.cost_nano) == (330, 12_000)
    assert (key_day.tokens, key_day.cost_nano) == (110, 5_000)
    assert tenant_month.tokens == 330
    assert (key_total.tokens, key_total.cost_nano) == (112, 5_001)
    # the new day and the new month start from zero; the total does not
    day, month, total = await usage.spent("team-a", "", [("tenant", "day"), ("tenant", "month"),
                                                         ("tenant", "total")], JAN_1)
    assert (day.tokens, month.tokens, total.tokens) == (2, 2, 332)

    rows = await usage.days("team-a", "", ["2026-12-30", "2026-12-31", "2027-01-01"])
    assert rows[0] == [0] * len(FIELDS)
    assert rows[1] == [2, 1, 300, 30, 6, 4, 12_000, 2]
    assert rows[2] == [1, 0, 1, 1, 3, 2, 1, 1]
    assert (await usage.days("team-a", "key_2", ["2026-12-31"]))[0][:3] == [1, 1, 200]
    assert (await usage.days("team-b", "", ["2026-12-31"]))[0] == [0] * len(FIELDS)


async def test_tenant_names_cannot_move_the_hash_tag(usage: UsageStore) -> None:
    await usage.add("a}{b", "k}", delta(5, 5, 0), DEC_31)
    assert (await usage.spent("a}{b", "k}", [("key", "day")], DEC_31))[0].tokens == 10
    assert (await usage.spent("a", "", [("tenant", "day")], DEC_31))[0].tokens == 0


async def test_redis_rows_expire_and_share_one_slot() -> None:
    client = await flushed_redis()
    store = RedisStore(REDIS_URL, **PATIENT)
    try:
        await RedisUsage(store.io, retention_days=2).add("t", "k", delta(1, 1, 0), DEC_31)
        keys = sorted(k.decode() for k in await client.keys("loopgate:*"))
        assert len(keys) == 6
        assert usage_key("t", "k", "d:2026-12-31") in keys and usage_key("t", "", "all") in keys
        assert {key.split("}")[0] for key in keys} == {"loopgate:{u:t"}  # one hash tag: one slot, one script
        for key in keys:
            assert 0 < await client.ttl(key) <= 2 * 86400
    finally:
        await client.flushdb()
        await client.aclose()
        await store.aclose()


async def test_memory_prunes_old_days() -> None:
    usage = MemoryUsage(retention_days=2)
    await usage.add("t", "", delta(1, 1, 0), DEC_31)
    await usage.add("t", "", delta(1, 1, 0), DEC_31 + 5 * 86400)
    assert (await usage.days("t", "", ["2026-12-31"]))[0] == [0] * len(FIELDS)
    assert (await usage.spent("t", "", [("tenant", "total")], DEC_31 + 5 * 86400))[0].tokens == 4


async def test_redis_coalesces_requests_into_timed_flushes() -> None:
    import asyncio

    client = await flushed_redis()
    store = RedisStore(REDIS_URL, **PATIENT)
    usage = RedisUsage(store.io, flush_s=0.05)
    try:
        for tenant in ("t1", "t1", "t2"):
            assert usage.add_now(tenant, "k", delta(10, 1, 100).values(), DEC_31)
        assert await client.keys("loopgate:*") == []  # nothing written during the requests
        deadline = asyncio.get_running_loop().time() + 5
        while not await client.exists(usage_key("t2", "", "all")):
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        (t1,) = await usage.days("t1", "k", ["2026-12-31"])
        assert t1[:3] == [2, 0, 20] and t1[6] == 200
        assert (await usage.spent("t2", "", [("tenant", "total")], DEC_31))[0].tokens == 11
    finally:
        await client.flushdb()
        await client.aclose()
        await store.aclose()


async def test_a_failed_flush_is_reported_not_raised() -> None:
    import asyncio
    port = free_port()
    store = RedisStore(f"redis://127.0.0.1:{port}/0", socket_connect_timeout=0.2, op_timeout=0.5)
    failures: list[str] = []
    usage = RedisUsage(store.io, flush_s=0.01)
    usage.on_error = lambda op, cause: failures.append(op)
    try:
        assert usage.add_now("t", "k", delta(1, 1, 0).values(), DEC_31)
        for _ in range(300):
            if failures:
                break
            await asyncio.sleep(0.01)
        assert failures == ["write"]
        assert usage.add_now("t", "k", delta(1, 1, 0).values(), DEC_31)  # the failed batch did not pile up
    finally:
        await store.aclose()


async def test_memory_applies_pending_rows_when_many_wait() -> None:
    usage = MemoryUsage()
    for index in range(MemoryUsage.MAX_PENDING + 5):
        assert usage.add_now(f"t{index}", "", delta(1, 0, 0).values(), DEC_31)
    assert len(usage._pending) <= MemoryUsage.MAX_PENDING
    assert (await usage.days("t0", "", ["2026-12-31"]))[0][0] == 1
