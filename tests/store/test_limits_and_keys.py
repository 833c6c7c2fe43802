"""The rate-limit buckets and the managed-key records, the same behaviour in memory and in every Redis deployment.

Time is passed in (``now``), so bucket arithmetic is checked exactly, without sleeping.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import orjson
import pytest

from gateway.store.base import Store
from gateway.store.factory import open_key_store, open_limiter
from gateway.store.keys.base import (
    KeyLimitReached,
    KeyRevoked,
    KeyStore,
    KeyUnreadable,
    StaleKey,
    unreadable,
    version_of,
)
from gateway.store.limits.base import LimitScope, RateLimiter
from tests.redis_servers import PATIENT
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


async def test_a_limit_set_on_a_key_that_had_none_starts_with_a_full_bucket(store_factory: StoreFactory) -> None:
    """A key edited from no tpm to tpm 50,000 was refused at once: its unlimited level had been kept as 0."""
    now = time.time()
    limiter = open_limiter(await store_factory())
    assert (await limiter.admit("t", (LimitScope("key", "key_8", 3, 0, 0),), 10, "a", 60, now)).allowed
    tokens_set = await limiter.admit("t", (LimitScope("key", "key_8", 3, 1000, 0),), 900, "b", 60, now)
    assert tokens_set.allowed and tokens_set.tokens is not None and tokens_set.tokens.remaining == 100
    assert tokens_set.requests is not None and tokens_set.requests.remaining == 1
    assert (await limiter.admit("t", (LimitScope("key", "key_9", 0, 1000, 0),), 10, "a", 60, now)).allowed
    requests_set = await limiter.admit("t", (LimitScope("key", "key_9", 3, 1000, 0),), 10, "b", 60, now)
    assert requests_set.allowed and requests_set.requests is not None and requests_set.requests.remaining == 2
    # Large limits, served from leased slices (Redis) and given back on close: the same.
    big = LimitScope("key", "key_10", 600, 0, 0)
    for i in range(20):
        assert (await limiter.admit("t", (big,), 16, f"c{i}", 60, now)).allowed
    await limiter.aclose()
    again = open_limiter(await store_factory())
    edited = await again.admit("t", (LimitScope("key", "key_10", 600, 50_000, 0),), 40_000, "d", 60, now)
    assert edited.allowed, edited
    assert edited.tokens is not None and edited.tokens.remaining >= 9_000
    await again.aclose()


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


async def _write_raw(store: Store, keys: KeyStore, key_id: str, raw: bytes) -> None:
    """A value written straight into the store, past every check (an old gateway, a hand edit, damage)."""
    if store.kind == "memory":
        keys._records[key_id] = raw  # type: ignore[attr-defined]
        keys._ends.setdefault(key_id, math.inf)  # type: ignore[attr-defined]
    else:
        from gateway.store.keys.redis import ALL
        from gateway.store.redis import RedisStore

        assert isinstance(store, RedisStore)
        await store.io.client.hset(ALL, key_id, raw)


def _record(key_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": key_id, "tenant": "t", "hash": key_id.encode().hex().ljust(64, "0"), "name": key_id, **fields}


async def test_key_records_versions_and_generation(store_factory: StoreFactory) -> None:
    one, two = await store_factory(), await store_factory()
    first = open_key_store(one)
    # In memory the key store is the process's own (the Runtime opens one); Redis replicas share theirs.
    second = first if one.kind == "memory" else open_key_store(two)
    assert await first.generation() == 0 and (await first.load()) == (0, [])
    record = _record("key_a")
    assert await first.create(record, time.time()) == 1
    assert await second.generation() == 1
    assert await second.get("key_a") == {**record, "version": 1}
    with pytest.raises(KeyError):
        await second.update(_record("key_b"), 1)
    assert await second.update({**record, "rpm": 5}, 1) == 2
    # A write over the version it read, after another write moved it: refused, nothing changed.
    with pytest.raises(StaleKey):
        await first.update({**record, "rpm": 9}, 1)
    generation, records = await first.load()
    assert generation == 2 and records == [{**record, "rpm": 5, "version": 2}]
    assert await first.find(bytes.fromhex(record["hash"])) == (2, {**record, "rpm": 5, "version": 2})
    assert await first.find(b"\x01" * 32) == (2, None)


async def test_a_revoke_is_for_good_inside_the_store(keys: KeyStore) -> None:
    """Regression (issue 29): no write, not even one over the current version, makes a revoked key live."""
    record = _record("key_r")
    await keys.create(record, time.time())
    await keys.update({**record, "revoked": True, "revoked_at": time.time()}, 1)
    with pytest.raises(KeyRevoked):
        await keys.update({**record, "rpm": 3}, 2)
    stored = await keys.get("key_r")
    assert stored is not None and stored["revoked"] is True and "rpm" not in stored


async def test_racing_edits_and_revokes_never_bring_a_key_back(store_factory: StoreFactory) -> None:
    """Read-modify-write from two replicas at once: every revoke that was answered stays in force."""
    one, two = await store_factory(), await store_factory()
    replicas = [open_key_store(one)]
    replicas.append(replicas[0] if one.kind == "memory" else open_key_store(two))

    async def edit(store: KeyStore, key_id: str, change: dict[str, Any]) -> bool:
        for _ in range(5):
            current = await store.get(key_id)
            assert current is not None
            if current.get("revoked") and not change.get("revoked"):
                return False
            try:
                await store.update({**current, **change}, version_of(current))
                return True
            except StaleKey:
                continue
            except KeyRevoked:
                return False
        return False

    for trial in range(20):
        key_id = f"key_race{trial}"
        await replicas[0].create(_record(key_id), time.time())
        revoked, _ = await asyncio.gather(edit(replicas[trial % 2], key_id, {"revoked": True, "revoked_at": 1.0}),
                                          edit(replicas[(trial + 1) % 2], key_id, {"rpm": trial + 1}))
        stored = await replicas[0].get(key_id)
        assert stored is not None
        assert not revoked or stored["revoked"] is True, stored


async def test_key_cap_counts_live_keys_only(keys: KeyStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression (issue 29): revoked and expired keys held the cap for ever."""
    import gateway.store.keys.base

    monkeypatch.setattr(gateway.store.keys.base, "MAX_MANAGED_KEYS", 2)
    now = time.time()
    await keys.create(_record("a"), now)
    await keys.create(_record("b", expires_at=now + 10), now)
    with pytest.raises(KeyLimitReached):
        await keys.create(_record("c"), now)
    await keys.create(_record("c"), now + 11)  # b expired: one live key
    await keys.update({**_record("a"), "revoked": True, "revoked_at": now + 12}, 1)
    await keys.create(_record("d"), now + 12)  # a revoked
    with pytest.raises(KeyLimitReached):
        await keys.create(_record("e"), now + 12)
    assert {r["id"] for r in (await keys.load())[1]} == {"a", "b", "c", "d"}  # kept for the retention


async def test_ended_records_are_purged_after_the_retention(store: Store) -> None:
    keys = open_key_store(store, retention_s=100.0)
    now = time.time()
    live, gone = _record("key_live"), _record("key_gone")
    await keys.create(live, now)
    await keys.create(gone, now)
    await keys.create(_record("key_exp", expires_at=now + 5), now)
    await keys.update({**gone, "revoked": True, "revoked_at": now}, 1)
    assert await keys.purge(now + 99) == 0
    generation = await keys.generation()
    assert await keys.purge(now + 106) == 2
    assert await keys.generation() > generation  # replicas reload
    assert await keys.get("key_gone") is None and await keys.get("key_exp") is None
    assert await keys.find(bytes.fromhex(gone["hash"])) == (await keys.generation(), None)
    assert [r["id"] for r in (await keys.load())[1]] == ["key_live"]
    # A create purges too.
    await keys.update({**live, "revoked": True, "revoked_at": now}, 1)
    await keys.create(_record("key_new"), now + 200)
    assert [r["id"] for r in (await keys.load())[1]] == ["key_new"]


async def test_an_unreadable_stored_value_is_reported_never_raised(store: Store) -> None:
    keys = open_key_store(store)
    await keys.create(_record("key_ok"), time.time())
    await _write_raw(store, keys, "key_bad", b"{not json")
    await _write_raw(store, keys, "key_list", b"[1, 2]")
    _, records = await keys.load()
    assert sorted(records, key=lambda r: r["id"]) == [unreadable("key_bad"), unreadable("key_list"),
                                                       {**_record("key_ok"), "version": 1}]
    assert await keys.get("key_bad") == unreadable("key_bad")
    with pytest.raises(KeyUnreadable):
        await keys.update(_record("key_bad"), 0)
    # Only a revoke replaces it (then the retention purges it like any revoked key).
    await keys.update({"id": "key_bad", "tenant": "", "hash": "", "revoked": True, "revoked_at": 1.0}, -1)
    stored = await keys.get("key_bad")
    assert stored is not None and stored["revoked"] is True


async def test_records_from_before_the_indexes_count_and_are_found(redis_raw: Any, redis_url: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Records written by an older gateway (no ``ends``/``hash`` index) are indexed by the next write."""
    import gateway.store.keys.base
    from gateway.store.keys.redis import ALL
    from gateway.store.redis import RedisStore

    monkeypatch.setattr(gateway.store.keys.base, "MAX_MANAGED_KEYS", 2)
    old = _record("key_old")
    await redis_raw.hset(ALL, mapping={"key_old": orjson.dumps(old),
                                       "key_old_revoked": orjson.dumps({**_record("key_old_revoked"),
                                                                        "revoked": True})})
    store = RedisStore(redis_url, **PATIENT)
    try:
        keys = open_key_store(store)
        await keys.create(_record("key_new"), time.time())
        with pytest.raises(KeyLimitReached):  # key_old is live and counted
            await keys.create(_record("key_newer"), time.time())
        assert (await keys.find(bytes.fromhex(old["hash"])))[1] == old
        await keys.update({**old, "rpm": 2}, 0)  # version 0: written before versions existed
        assert (await keys.get("key_old") or {})["version"] == 1
    finally:
        await store.aclose()


async def test_the_key_id_salt_is_one_per_deployment(redis_raw: Any, redis_url: str) -> None:
    from gateway.store.redis import RedisStore

    stores = [RedisStore(redis_url, **PATIENT), RedisStore(redis_url, **PATIENT)]
    try:
        first, second = (open_key_store(store) for store in stores)
        salt = await first.salt(b"a" * 32)
        assert salt == b"a" * 32
        assert await second.salt(b"b" * 32) == salt  # another replica, or a restart: the stored one
    finally:
        for store in stores:
            await store.aclose()
