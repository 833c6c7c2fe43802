"""Price config (validated, one price per target label) and the cost of a list of answered calls."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config.checks import ConfigError
from gateway.config.validate import build_config
from gateway.usage.budgets import reset_time
from gateway.usage.pricing import Pricing


def config(target_price: Any = None, provider_prices: Any = None, extra_route: Any = None,
           usage: Any = None) -> dict[str, Any]:
    target: dict[str, Any] = {"provider": "p", "model": "m1"}
    if target_price is not None:
        target["price"] = target_price
    provider: dict[str, Any] = {"type": "mock"}
    if provider_prices is not None:
        provider["prices"] = provider_prices
    raw: dict[str, Any] = {"providers": {"p": provider}, "models": {"r": {"targets": [target, {"provider": "p",
                                                                                               "model": "m2"}]}}}
    if extra_route is not None:
        raw["models"]["r2"] = extra_route
    if usage is not None:
        raw["usage"] = usage
    return raw


def test_target_price_wins_over_provider_price() -> None:
    built = build_config(config({"input_per_mtok": 3, "output_per_mtok": 4},
                                {"m1": {"input_per_mtok": 1, "output_per_mtok": 1},
                                 "m2": {"input_per_mtok": 1, "output_per_mtok": 2, "cached_input_per_mtok": 0.1}}))
    pricing = Pricing.from_config(built)
    # m1: target price; cached tokens at the input price when no cached price is given
    assert pricing.cost_nano([["p:m1", 1_000_000, 1_000_000, 500_000, 0]]) == 7 * 10**9
    # m2: provider price, cached at its cached price; reasoning is part of the completion already
    assert pricing.cost_nano([["p:m2", 1_000_000, 500_000, 400_000, 100_000]]) == round((0.6 + 0.04 + 1.0) * 10**9)
    assert pricing.cost_nano([]) == 0
    assert pricing.cost_nano([["p:m1", 10, 10, 0, 0], ["p:other", 1, 1, 0, 0]]) is None


def test_no_prices_means_no_cost() -> None:
    pricing = Pricing.from_config(build_config(config()))
    assert not pricing
    assert pricing.cost_nano([["p:m1", 1, 1, 0, 0]]) is None


@pytest.mark.parametrize(("raw", "path", "words"), [
    (config({"input_per_mtok": 1}), "models.r.targets[0].price.output_per_mtok", "required"),
    (config({"input_per_mtok": -1, "output_per_mtok": 1}), "models.r.targets[0].price.input_per_mtok", "USD"),
    (config({"input_per_mtok": 1e9, "output_per_mtok": 1}), "models.r.targets[0].price.input_per_mtok", "USD"),
    (config({"input_per_mtok": "1", "output_per_mtok": 1}), "models.r.targets[0].price.input_per_mtok", "number"),
    (config({"input_per_mtok": 1, "output_per_mtok": 1, "cached": 1}), "models.r.targets[0].price.cached",
     "unknown"),
    (config(provider_prices=["m1"]), "providers.p.prices", "mapping"),
    (config(provider_prices={"m1": {"input_per_mtok": 1, "output_per_mtok": True}}),
     "providers.p.prices.m1.output_per_mtok", "boolean"),
    (config({"input_per_mtok": 1, "output_per_mtok": 1},
            extra_route={"targets": [{"provider": "p", "model": "m1",
                                      "price": {"input_per_mtok": 2, "output_per_mtok": 1}}]}),
     "models.r2.targets[0].price", "another price"),
    (config(usage={"retention_days": 0}), "usage.retention_days", "> 0"),
    (config(usage={"keep": True}), "usage.keep", "unknown"),
    (config(usage={"flush_s": 60}), "usage.flush_s", "at most"),
    (config(usage={"flush_s": 0}), "usage.flush_s", "> 0"),
])
def test_bad_price_config_names_the_key(raw: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build_config(raw)
    assert caught.value.path == path
    assert words in caught.value.problem


def test_the_same_price_twice_is_fine() -> None:
    price = {"input_per_mtok": 2, "output_per_mtok": 1}
    build_config(config(price, extra_route={"targets": [{"provider": "p", "model": "m1", "price": price}]}))


def test_budget_periods_reset_at_utc_boundaries() -> None:
    import calendar

    now = calendar.timegm((2026, 12, 31, 23, 0, 0))
    assert reset_time("day", now) == "2027-01-01T00:00:00Z"
    assert reset_time("month", now) == "2027-01-01T00:00:00Z"
    assert reset_time("month", calendar.timegm((2026, 2, 10, 0, 0, 0))) == "2026-03-01T00:00:00Z"
    assert reset_time("total", now) is None


def test_spent_cache_reads_once_a_second_and_adds_what_the_process_records() -> None:
    from gateway.store.usage.base import Spent
    from gateway.usage.budgets import REFRESH_S, BudgetCheck, SpentCache

    key = BudgetCheck("key", "k1", "day", "tokens", 100, "k1")
    tenant = BudgetCheck("tenant", "'t'", "month", "usd", 1, "t")
    cache = SpentCache()
    assert cache.stale([key, tenant], 10.0) == [key, tenant]
    cache.add([key, tenant], 5, 5)  # nothing remembered yet: nothing to add to
    cache.remember([key, tenant], [Spent(40, 0), Spent(0, 10)], 10.0)
    assert cache.stale([key, tenant], 10.0 + REFRESH_S / 2) == []
    cache.add([key, tenant], 30, 7)
    cache.add([tenant], 1, 1)  # another key of the tenant (no budget of its own) counts for it only
    assert cache.spent(key) == Spent(70, 7)
    assert cache.spent(tenant) == Spent(31, 18)
    assert cache.stale([key, tenant], 10.0 + REFRESH_S) == [key, tenant]
    assert cache.stale([BudgetCheck("key", "k1", "month", "tokens", 100, "k1")], 10.5) != []  # period changed


async def test_judge_now_asks_for_the_store_or_names_the_first_exhausted_budget() -> None:
    from gateway.store.usage.base import Spent
    from gateway.usage.budgets import REFRESH_S, BudgetCheck, SpentCache

    key = BudgetCheck("key", "k1", "day", "tokens", 100, "k1")
    tenant = BudgetCheck("tenant", "'t'", "month", "usd", 1, "t")
    cache = SpentCache()
    assert cache.judge_now([key, tenant], 10.0) is True  # no reading yet
    cache.remember([key, tenant], [Spent(40, 0), Spent(0, 10)], 10.0)
    assert cache.judge_now([key, tenant], 10.1) is False  # fresh, both with room
    cache.add([key, tenant], 60, 10**9)
    assert cache.judge_now([key, tenant], 10.2) == (key, Spent(100, 10**9))  # the first exhausted, in order
    assert cache.judge_now([tenant], 10.2) == (tenant, Spent(60, 10**9 + 10))
    assert cache.judge_now([key, tenant], 10.0 + REFRESH_S) is True  # stale: read again
    cache.reading([key, tenant])  # a read under way: the last reading is judged meanwhile
    assert cache.judge_now([key, tenant], 10.0 + REFRESH_S) == (key, Spent(100, 10**9))
    assert cache.judge_now([BudgetCheck("key", "k1", "month", "tokens", 100, "k1")], 10.5) is True  # other period
