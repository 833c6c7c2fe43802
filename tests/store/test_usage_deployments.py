"""Usage aggregates on every store deployment of the contract suite: memory, Redis, TLS + ACL, Cluster.

The Cluster run is the one that matters: a request's six rows and a budget read's rows must sit in
one slot (the ``{u:<tenant>}`` hash tag), or the script calls would be refused with CROSSSLOT.
"""

from __future__ import annotations

import calendar

from gateway.store.redis import RedisStore
from gateway.store.usage.base import UsageDelta, UsageStore
from gateway.store.usage.memory import MemoryUsage
from gateway.store.usage.redis import RedisUsage
from tests.store.conftest import StoreFactory

DAY = calendar.timegm((2026, 12, 31, 12, 0, 0))


def usage_of(store: object) -> UsageStore:
    return RedisUsage(store.io, flush_s=0.01) if isinstance(store, RedisStore) else MemoryUsage()


async def test_usage_rows_on_every_deployment(store_factory: StoreFactory) -> None:
    usage = usage_of(await store_factory())
    for tenant in ("team-a", "team-b", "team-a"):
        await usage.add(tenant, "key_1", UsageDelta(requests=1, prompt_tokens=10, completion_tokens=2,
                                                    cost_nano=500, tool_calls=1), DAY)
    for tenant, key in (("team-a", "key_2"), ("team-b", "")):
        assert usage.add_now(tenant, key, UsageDelta(requests=1, errors=1, prompt_tokens=1).values(), DAY)
    await usage.drain(5.0)

    key_day, tenant_month, tenant_total = await usage.spent(
        "team-a", "key_1", [("key", "day"), ("tenant", "month"), ("tenant", "total")], DAY)
    assert (key_day.tokens, key_day.cost_nano) == (24, 1000)
    assert (tenant_month.tokens, tenant_total.tokens) == (25, 25)
    (row,) = await usage.days("team-a", "", ["2026-12-31"])
    assert row == [3, 1, 21, 4, 0, 0, 1000, 2]
    (row_b,) = await usage.days("team-b", "", ["2026-12-31"])
    assert row_b[:3] == [2, 1, 11]
