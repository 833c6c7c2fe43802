"""Budget admission reserves each request's estimate, so a concurrent burst stops at the budget."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gateway.config.model import ApiKey, Budget
from gateway.errors import GatewayError
from gateway.store.usage.base import Spent, UsageDelta, Want
from gateway.store.usage.memory import MemoryUsage
from gateway.usage.meter import Metering
from gateway.usage.pricing import Pricing


class CountingUsage(MemoryUsage):
    """The in-process store, counting its budget admissions."""

    def __init__(self) -> None:
        super().__init__()
        self.reserves = 0

    async def reserve(self, tenant: str, key_id: str, wants: list[Want], tokens: int, cost_nano: int, rid: str,
                      lease_s: float, now: float) -> tuple[int, list[Spent], list[Spent]]:
        self.reserves += 1
        await asyncio.sleep(0)  # a store round trip: the burst's checks all start before any is answered
        return await super().reserve(tenant, key_id, wants, tokens, cost_nano, rid, lease_s, now)


KEY = ApiKey(key="secret", tenant="t", id="k1", name="k1")
#: a request body the estimate reads as 30 tokens (bytes / 4 + 1)
BODY = 116


async def _burst(metering: Metering, count: int) -> list[str]:
    meters = [metering.meter(KEY) for _ in range(count)]

    async def one(meter: object) -> str:
        try:
            pending = meter.check_budget(BODY)  # type: ignore[attr-defined]
            if pending is not None:
                await pending
        except GatewayError as exc:
            return exc.code or ""
        return "ok"
    outcomes = list(await asyncio.gather(*(one(m) for m in meters)))
    for meter, outcome in zip(meters, outcomes, strict=True):
        meter.close(200 if outcome == "ok" else 429)  # nothing ran: releases the reservation, records no tokens
    return outcomes


async def test_a_concurrent_burst_is_admitted_only_up_to_the_budget() -> None:
    store = CountingUsage()
    metering = Metering(Pricing({}), store, frozenset({"t"}), {"t": Budget(limit=100)})
    # Before, every check of the burst was judged on the same reading (nothing spent yet): all 10 ran.
    outcomes = await _burst(metering, 10)
    assert outcomes.count("ok") == 4, outcomes  # reserved 0, 30, 60, 90 < 100: the fifth finds 120 reserved
    assert outcomes.count("insufficient_quota") == 6
    assert store._holds == {} and store._reserved == {}, "every reservation went back with its request's usage"
    # Nothing was spent (the meters recorded no tokens): the next burst has the whole budget again.
    assert (await _burst(metering, 10)).count("ok") == 4


async def test_spending_counts_and_an_exhausted_budget_is_refused_without_the_store() -> None:
    store = CountingUsage()
    metering = Metering(Pricing({}), store, frozenset({"t"}), {"t": Budget(limit=100)})
    await store.add("t", "k1", UsageDelta(requests=1, prompt_tokens=80), time.time())
    outcomes = await _burst(metering, 3)
    assert outcomes == ["ok", "insufficient_quota", "insufficient_quota"]  # 80 spent + 30 reserved
    reserves = store.reserves
    await store.add("t", "k1", UsageDelta(requests=1, prompt_tokens=30), time.time())
    meter = metering.meter(KEY)
    pending = meter.check_budget(BODY)
    assert pending is not None
    with pytest.raises(GatewayError):
        await pending  # 110 spent: refused, and the reading remembered
    with pytest.raises(GatewayError):
        metering.meter(KEY).check_budget(BODY)  # a fresh reading says exhausted: no coroutine, no store call
    assert store.reserves == reserves + 1
    other = ApiKey(key="other", tenant="u", id="k2", name="k2")
    assert metering.meter(other).check_budget(BODY) is None  # no budget at all


async def test_the_estimate_learns_the_keys_typical_request() -> None:
    metering = Metering(Pricing({}), CountingUsage(), frozenset({"t"}), {"t": Budget(limit=100)})
    assert metering.estimate("k1", BODY) == (30, 0)
    metering._learn("k1", 200, 5)
    assert metering.estimate("k1", BODY) == (200, 5), "a key whose requests cost 200 reserves 200"
    assert metering.estimate("k1", 4000)[0] == 1001, "a larger prompt than usual reserves its own size"


async def test_a_new_key_reserves_its_answer_in_tokens_and_at_the_dearest_target_in_usd() -> None:
    """Regression (issue 45): a new key's reservation was its prompt alone (and nothing in USD), so a
    concurrent burst of long answers all ran, 30 times the budget."""
    from gateway.config.model import Price
    prices = {"cheap:m": Price(input_per_mtok=1.0, output_per_mtok=2.0),
              "dear:m": Price(input_per_mtok=3.0, output_per_mtok=10.0)}
    pricing = Pricing(prices, {"route": ["cheap:m", "dear:m", "unpriced:m"]})
    metering = Metering(pricing, CountingUsage(), frozenset({"t"}), {"t": Budget(limit=100)})
    # prompt 30 + answer 5,010 tokens; in USD at the dearest rates (3 and 10 USD a million tokens)
    assert metering.estimate("k1", BODY, 5010, "route") == (5040, 30 * 3_000 + 5010 * 10_000)
    assert metering.estimate("k1", BODY, 5010, "other") == (5040, 0)  # no priced target: tokens only
    metering._learn("k1", 200, 5)
    assert metering.estimate("k1", BODY, 5010, "route") == (200, 5), "with history: its typical request"


async def test_far_from_the_limit_requests_are_admitted_without_the_store_up_to_a_small_share() -> None:
    store = CountingUsage()
    metering = Metering(Pricing({}), store, frozenset({"t"}), {"t": Budget(limit=100_000)})
    first = metering.meter(KEY).check_budget(BODY)
    assert first is not None
    await first  # no reading yet: reserved in the store, which answers with the reading
    assert store.reserves == 1
    # 2 % of 100,000 is 2,000 tokens: 66 requests of 30 without a store call, then one asks the store again.
    for _ in range(66):
        assert metering.meter(KEY).check_budget(BODY) is None
    pending = metering.meter(KEY).check_budget(BODY)
    assert pending is not None and store.reserves == 1
    await pending
    assert store.reserves == 2
    assert metering.meter(KEY).check_budget(BODY) is None, "a new reading: a new local share"


async def test_past_half_the_budget_every_request_reserves_in_the_store() -> None:
    store = CountingUsage()
    metering = Metering(Pricing({}), store, frozenset({"t"}), {"t": Budget(limit=100_000)})
    await store.add("t", "k1", UsageDelta(requests=1, prompt_tokens=50_000), time.time())
    for count in range(1, 4):
        pending = metering.meter(KEY).check_budget(BODY)
        assert pending is not None, "the reading says half the budget is used: exact again"
        await pending
        assert store.reserves == count


async def test_while_a_reading_is_renewed_far_requests_use_the_last_one() -> None:
    from gateway.usage.budgets import REFRESH_S

    class Gated(CountingUsage):
        def __init__(self) -> None:
            super().__init__()
            self.gate = asyncio.Event()
            self.gate.set()

        async def reserve(self, *args: Any, **kwargs: Any) -> tuple[int, list[Spent], list[Spent]]:
            await self.gate.wait()
            return await super().reserve(*args, **kwargs)

    store = Gated()
    metering = Metering(Pricing({}), store, frozenset({"t"}), {"t": Budget(limit=100_000)})
    first = metering.meter(KEY).check_budget(BODY)
    assert first is not None
    await first
    for seen in metering._spent._seen.values():
        seen.read_at -= REFRESH_S  # the reading got old: the next request renews it
    store.gate.clear()
    renewing = asyncio.ensure_future(metering.meter(KEY).check_budget(BODY))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    # Before, every request that found the reading old asked the store too.
    assert all(metering.meter(KEY).check_budget(BODY) is None for _ in range(10))
    store.gate.set()
    await renewing
    assert store.reserves == 2


class _Route:
    """Counts what a budget asks of the route: the answer's reservation, worked out only when needed."""

    def __init__(self, output: int) -> None:
        self.output = output
        self.asked: list[dict[str, Any]] = []

    def output_reservation(self, params: Any) -> int:
        self.asked.append(dict(params))
        return self.output


async def test_the_answer_s_reservation_is_worked_out_only_for_a_budgeted_key_without_history() -> None:
    store = CountingUsage()
    metering = Metering(Pricing({}), store, frozenset({"t"}), {"t": Budget(limit=1000)})
    route, params = _Route(500), {"max_tokens": 500}
    other = ApiKey(key="other", tenant="u", id="k2", name="k2")
    assert metering.meter(other).check_budget(BODY, route, params) is None  # no budget: nothing to reserve
    assert route.asked == []
    meter = metering.meter(KEY)
    pending = meter.check_budget(BODY, route, params)
    assert pending is not None and route.asked == [params]
    await pending
    assert [tokens for tokens, _ in store._reserved.values()] == [30 + 500]  # the prompt and the answer
    meter.close(200)
    metering._learn("k1", 40, 0)  # a key with history reserves its typical request: the route is not asked
    pending = metering.meter(KEY).check_budget(BODY, route, params)
    if pending is not None:
        await pending
    assert route.asked == [params]
