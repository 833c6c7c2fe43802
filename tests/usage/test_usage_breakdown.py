"""Usage by route and model: the day rows' breakdown on both stores, rows from before it, the meter's split."""

from __future__ import annotations

import calendar
import time
from collections.abc import AsyncIterator

import pytest

from gateway.config.model import ApiKey, Price
from gateway.store.redis import RedisStore
from gateway.store.usage.base import FIELDS, NO_MODEL, UNKNOWN, UsageDelta, UsageStore
from gateway.store.usage.memory import MemoryUsage
from gateway.store.usage.redis import RedisUsage, usage_key
from gateway.usage.meter import Metering
from gateway.usage.pricing import Pricing
from tests.redis_servers import PATIENT
from tests.usage.redis_access import REDIS_URL, flushed_redis

DEC_31 = calendar.timegm((2026, 12, 31, 12, 0, 0))
DAY = "2026-12-31"


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


def values(requests: int, prompt: int, completion: int, cost_nano: int, errors: int = 0) -> tuple[int, ...]:
    return UsageDelta(requests=requests, errors=errors, prompt_tokens=prompt, completion_tokens=completion,
                      cost_nano=cost_nano).values()


async def test_day_rows_split_by_route_and_model_for_tenant_and_key(usage: UsageStore) -> None:
    one = values(1, 100, 10, 5_000)
    split_a, split_b = values(1, 60, 6, 2_000, errors=1), values(0, 40, 4, 1_000)
    await usage.add("team|a", "key_1", UsageDelta(*one), DEC_31, dims=(("smart", "openai:gpt-4o", one),))
    await usage.add("team|a", "key_2", UsageDelta(*map(sum, zip(split_a, split_b, strict=True))), DEC_31,
                    dims=(("sm|art", "anth|ropic:claude", split_a), ("sm|art", "openai:gpt-4o", split_b)))

    (tenant,) = await usage.breakdown("team|a", "", [DAY])
    assert tenant == {("smart", "openai:gpt-4o"): list(one), ("sm|art", "anth|ropic:claude"): list(split_a),
                      ("sm|art", "openai:gpt-4o"): list(split_b)}
    (key_2,) = await usage.breakdown("team|a", "key_2", [DAY])
    assert set(key_2) == {("sm|art", "anth|ropic:claude"), ("sm|art", "openai:gpt-4o")}
    # the parts add up to the day row; month and total rows (budgets) are what they were
    (day_row,) = await usage.days("team|a", "", [DAY])
    assert [sum(col) for col in zip(*tenant.values(), strict=True)] == day_row
    assert (await usage.spent("team|a", "", [("tenant", "month")], DEC_31))[0].tokens == 220
    assert await usage.breakdown("team|a", "", ["2026-12-30"]) == [{}]


async def test_counts_without_a_breakdown_show_as_unknown(usage: UsageStore) -> None:
    """A write without dims (as every row from before the breakdown) is the row's remainder."""
    await usage.add("t", "k", UsageDelta(*values(2, 20, 2, 0)), DEC_31)
    await usage.add("t", "k", UsageDelta(*values(1, 5, 1, 7)), DEC_31, dims=(("r", "p:m", values(1, 5, 1, 7)),))
    (parts,) = await usage.breakdown("t", "k", [DAY])
    assert parts == {("r", "p:m"): list(values(1, 5, 1, 7)), (UNKNOWN, UNKNOWN): list(values(2, 20, 2, 0))}


async def test_redis_reads_a_row_written_before_the_breakdown() -> None:
    """A day row as the previous release wrote it (plain fields only) reads back whole, as ``unknown``."""
    client = await flushed_redis()
    store = RedisStore(REDIS_URL, **PATIENT)
    try:
        key = usage_key("t", "", f"d:{DAY}")
        await client.hset(key, mapping={"r": 3, "e": 1, "p": 30, "c": 3, "n": 9})
        (parts,) = await RedisUsage(store.io).breakdown("t", "", [DAY])
        expected = [0] * len(FIELDS)
        for field, value in (("r", 3), ("e", 1), ("p", 30), ("c", 3), ("n", 9)):
            expected[FIELDS.index(field)] = value
        assert parts == {(UNKNOWN, UNKNOWN): expected}
        # new writes land beside it; the old counts stay ``unknown``
        usage = RedisUsage(store.io)
        await usage.add("t", "", UsageDelta(*values(1, 1, 1, 1)), DEC_31, dims=(("r", "p:m", values(1, 1, 1, 1)),))
        (parts,) = await usage.breakdown("t", "", [DAY])
        assert parts[(UNKNOWN, UNKNOWN)] == expected and parts[("r", "p:m")] == list(values(1, 1, 1, 1))
        fields = {f.decode() for f in await client.hkeys(key)}
        assert "r|p:m|p" in fields and "r" in fields
        assert not any("|" in f.decode() for f in await client.hkeys(usage_key("t", "", "all")))  # day rows only
    finally:
        await client.flushdb()
        await client.aclose()
        await store.aclose()


def _metering(prices: dict[str, Price] | None = None) -> Metering:
    return Metering(Pricing(prices or {}), MemoryUsage(), frozenset({"t"}),
                    targets=frozenset({"openai:gpt-4o", "anthropic:claude"}))


def test_a_direct_routes_made_up_model_never_becomes_a_row() -> None:
    metering = _metering()
    dims = metering.breakdown("openai/*", [["openai:made-up-by-the-caller-123", 5, 1, 0, 0]],
                              values(1, 5, 1, 0), 0)
    assert dims == (("openai/*", "openai:*", values(1, 5, 1, 0)),)
    for index in range(50):
        metering.model_label(f"openai:caller-{index}")
    assert {metering.model_label(f"openai:caller-{i}") for i in range(50)} == {"openai:*"}
    assert metering.model_label("openai:gpt-4o") == "openai:gpt-4o"


def test_a_failover_loop_splits_tokens_and_cost_by_the_target_that_spent_them() -> None:
    metering = _metering({"openai:gpt-4o": Price(1.0, 3.0), "anthropic:claude": Price(2.0, 5.0)})
    calls = [["anthropic:claude", 100, 10, 0, 0], ["openai:gpt-4o", 200, 20, 0, 0]]
    cost = metering.pricing.cost_nano(calls)
    assert cost is not None
    total = (1, 0, 300, 30, 0, 0, cost, 2)
    dims = dict((model, part) for _, model, part in metering.breakdown("smart", calls, total, cost))
    # the answer (the last call's target) carries the request and its tool calls; each target its own tokens
    assert dims["openai:gpt-4o"][:4] == (1, 0, 200, 20) and dims["openai:gpt-4o"][7] == 2
    assert dims["anthropic:claude"][:4] == (0, 0, 100, 10) and dims["anthropic:claude"][7] == 0
    assert dims["anthropic:claude"][6] == metering.pricing.cost_nano(calls[:1])
    assert tuple(map(sum, zip(*dims.values(), strict=True))) == total  # the parts add up exactly


async def test_a_request_no_target_answered_is_model_none() -> None:
    metering = _metering()
    store = metering.store
    assert isinstance(store, MemoryUsage)
    meter = metering.meter(ApiKey(key="sk", tenant="t", id="k1"))
    meter.route = "smart"
    meter.close(502)
    (parts,) = await store.breakdown("t", "k1", [_today()])
    assert parts == {("smart", NO_MODEL): [1, 1, 0, 0, 0, 0, 0, 0]}


def _today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())
