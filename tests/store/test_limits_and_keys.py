"""The rate-limit buckets and the managed-key records, the same behaviour in memory and in every Redis deployment.

Time is passed in (``now``), so bucket arithmetic is checked exactly, without sleeping.
"""

from __future__ import annotations

import time

import pytest

from gateway.store.base import Store
from gateway.store.factory import open_key_store, open_limiter
from gateway.store.keys.base import KeyLimitReached, KeyStore
from gateway.store.limits.base import LimitScope, RateLimiter
from tests.store.conftest import StoreFactory

KEY = LimitScope("key", "key_1", 3, 0, 0)


@pytest.fixture
async def store(store_factory: StoreFactory) -> Store:
    return await store_factory()


@pytest.fixture
def limiter(store: Store) -> RateLimiter:
    return open_limiter(store)


@pytest.fixture
def keys(store: Store) -> KeyStore:
    return open_key_store(store)


@pytest.mark.slow
async def test_rpm_admits_exactly_the_limit_then_refills(limiter: RateLimiter) -> None:
    now = time.time()
    decisions = [await limiter.admit("t", (KEY,), 1, f"m{i}", 60, now) for i in range(4)]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert [d.requests.remaining for d in decisions[:3] if d.requests] == [2, 1, 0]
    refused = decisions[3]
    assert (refused.kind, refused.scope, refused.retry_after_s) == ("requests", "key", pytest.approx(20.0))
    assert refused.requests is not None and refused.requests.limit == 3
    assert not (await limiter.admit("t", (KEY,), 1, "m", 60, now + 19.9)).allowed
    assert (await limiter.admit("t", (KEY,), 1, "m", 60, now + 20.1)).allowed


async def test_a_refused_request_takes_nothing_from_any_scope(limiter: RateLimiter) -> None:
    now = time.time()
    key = LimitScope("key", "key_2", 10, 0, 0)
    tenant = LimitScope("tenant", "t", 1, 0, 0)
    assert (await limiter.admit("t", (key, tenant), 1, "a", 60, now)).allowed
    refused = await limiter.admit("t", (key, tenant), 1, "b", 60, now)
    assert not refused.allowed and refused.scope == "tenant"
    alone = await limiter.admit("t", (key,), 1, "c", 60, now)
    assert alone.requests is not None and alone.requests.remaining == 8  # 10 - the first - this one


async def test_tpm_estimate_then_correction(limiter: RateLimiter) -> None:
    now = time.time()
    scope = LimitScope("key", "key_3", 0, 100, 0)
    assert (await limiter.admit("t", (scope,), 40, "a", 60, now)).allowed
    second = await limiter.admit("t", (scope,), 40, "b", 60, now)
    assert second.tokens is not None and second.tokens.remaining == 20 and second.requests is None
    third = await limiter.admit("t", (scope,), 40, "c", 60, now)
    assert (third.allowed, third.kind, third.retry_after_s) == (False, "tokens", pytest.approx(12.0))
    too_large = await limiter.admit("t", (scope,), 101, "d", 60, now)
    assert not too_large.allowed and too_large.too_large
    # Both used 15 tokens, not 40: 50 come back, and the next 40 fit.
    await limiter.settle("t", (scope,), -25, "a")
    await limiter.settle("t", (scope,), -25, "b")
    fourth = await limiter.admit("t", (scope,), 40, "e", 60, time.time())
    assert fourth.allowed and fourth.tokens is not None and 30 <= fourth.tokens.remaining <= 31


async def test_concurrency_slots_free_on_settle_or_lease_end(limiter: RateLimiter) -> None:
    now = time.time()
    scope = LimitScope("tenant", "t", 0, 0, 2)
    assert (await limiter.admit("t", (scope,), 1, "a", 5, now)).allowed
    assert (await limiter.admit("t", (scope,), 1, "b", 5, now)).allowed
    refused = await limiter.admit("t", (scope,), 1, "c", 5, now)
    assert (refused.allowed, refused.kind, refused.retry_after_s) == (False, "concurrency", 1.0)
    await limiter.settle("t", (scope,), 0, "a")
    assert (await limiter.admit("t", (scope,), 1, "c", 5, now)).allowed
    assert not (await limiter.admit("t", (scope,), 1, "d", 5, now + 1)).allowed
    # A replica that died holding "b" and "c" does not hold them past their lease.
    assert (await limiter.admit("t", (scope,), 1, "d", 5, now + 5.5)).allowed


async def test_tenants_with_braces_stay_apart(limiter: RateLimiter) -> None:
    now = time.time()
    one = LimitScope("tenant", "a}b", 1, 0, 0)
    assert (await limiter.admit("a}b", (one,), 1, "x", 60, now)).allowed
    other = LimitScope("tenant", "a", 1, 0, 0)
    assert (await limiter.admit("a", (other,), 1, "x", 60, now)).allowed


async def test_key_records_and_generation(store_factory: StoreFactory) -> None:
    one, two = await store_factory(), await store_factory()
    first = open_key_store(one)
    # In memory the key store is the process's own (the Runtime opens one); Redis replicas share theirs.
    second = first if one.kind == "memory" else open_key_store(two)
    assert await first.generation() == 0 and (await first.load()) == (0, [])
    record = {"id": "key_a", "tenant": "t", "hash": "00" * 32, "name": "a"}
    assert await first.put(record, create=True) == 1
    assert await second.generation() == 1
    with pytest.raises(KeyError):
        await second.put({**record, "id": "key_b"}, create=False)
    assert await second.put({**record, "revoked": True}, create=False) == 2
    generation, records = await first.load()
    assert generation == 2 and records == [{**record, "revoked": True}]


async def test_key_cap(keys: KeyStore, monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.store.keys.base

    monkeypatch.setattr(gateway.store.keys.base, "MAX_MANAGED_KEYS", 2)
    for name in ("a", "b"):
        await keys.put({"id": name, "tenant": "t", "hash": ""}, create=True)
    with pytest.raises(KeyLimitReached):
        await keys.put({"id": "c", "tenant": "t", "hash": ""}, create=True)
    assert await keys.put({"id": "a", "tenant": "t", "hash": "", "revoked": True}, create=False) == 3
