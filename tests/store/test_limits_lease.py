"""Leased allowance: far from a limit a replica spends a slice of the shared bucket locally.

Two ``RedisRateLimiter`` instances on one real Redis are two replicas. Whatever they lease, the
limit holds exactly across them, what sits unused goes back after ``IDLE_S``, a dead replica's
slots free after ``SLOT_LEASE_S`` and token corrections reach Redis within ``CORRECTION_WINDOW_S``.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.governance.admission import raw_headers
from gateway.store.factory import open_limiter
from gateway.store.limits.base import LimitScope
from gateway.store.limits.lease import CORRECTION_WINDOW_S, IDLE_S, SLOT_LEASE_S, TICK_S, Lease
from gateway.store.limits.redis import RedisRateLimiter, scope_keys
from gateway.store.redis import RedisStore
from tests.redis_servers import PATIENT
from tests.store.conftest import StoreFactory

# Long enough for the keeper to act once the deadline it watches has passed.
SETTLE_S = max(IDLE_S, CORRECTION_WINDOW_S) + TICK_S + 0.3


@pytest.fixture
async def replicas(redis_raw: aioredis.Redis, redis_url: str) -> AsyncIterator[tuple[RedisRateLimiter, ...]]:
    stores = [RedisStore(redis_url, **PATIENT), RedisStore(redis_url, **PATIENT)]
    limiters = tuple(RedisRateLimiter(store.io) for store in stores)
    try:
        yield limiters
    finally:
        for limiter in limiters:
            await limiter.aclose()
        for store in stores:
            await store.aclose()


async def _burst(limiters: tuple[RedisRateLimiter, ...], scope: LimitScope, tokens: int, count: int,
                 now: float, wave: int = 40) -> int:
    """``count`` takes in waves of ``wave`` concurrent ones spread over the replicas; how many were allowed."""
    admitted = 0
    for start in range(0, count, wave):
        decisions = await asyncio.gather(*(limiters[i % len(limiters)].admit("t", (scope,), tokens, f"m{i}", 60, now)
                                           for i in range(start, min(count, start + wave))))
        admitted += sum(d.allowed for d in decisions)
    return admitted


async def _drain(limiter: RedisRateLimiter, scope: LimitScope, tokens: int, now: float) -> int:
    """Takes one by one until refused (the replica's own slice spent too); how many were allowed."""
    admitted = 0
    while (await limiter.admit("t", (scope,), tokens, f"late{admitted}", 60, now)).allowed:
        admitted += 1
    return admitted


def _held(limiters: tuple[RedisRateLimiter, ...], scope: LimitScope) -> tuple[float, float, int]:
    """Unspent requests, tokens and slots the replicas hold of ``scope``."""
    leases = [limiter._leases[("t", scope)] for limiter in limiters]
    return (sum(lease.requests for lease in leases), sum(lease.tokens for lease in leases),
            sum(len(lease.slots) - lease.in_flight for lease in leases))


def _count_calls(limiter: RedisRateLimiter) -> list[int]:
    """Counts the limiter's script calls (instrumentation only: every call still runs)."""
    made: list[int] = []
    batch: Any = limiter._batch
    original = batch.call

    async def counting(*args: Any) -> Any:
        made.append(1)
        return await original(*args)

    batch.call = counting
    return made


async def _level(redis_raw: aioredis.Redis, scope: LimitScope, field: bytes) -> float:
    return float((await redis_raw.hgetall(scope_keys("t", scope)[0]))[field])


async def test_a_large_rpm_holds_exactly_across_two_replicas(replicas: tuple[RedisRateLimiter, ...],
                                                             redis_raw: aioredis.Redis) -> None:
    scope = LimitScope("key", "k_rpm", 1000, 0, 0)
    calls = [_count_calls(limiter) for limiter in replicas]
    now = time.time()  # fixed: no refill during the test
    admitted = await _burst(replicas, scope, 1, 900, now)
    assert admitted == 900
    assert sum(len(made) for made in calls) < 900 / 5  # the slices saved most round trips
    admitted += await _burst(replicas, scope, 1, 400, now)
    # Refused ones were refused while the other replica still held a slice: nothing more than that is missing.
    assert admitted + _held(replicas, scope)[0] == 1000
    assert admitted >= 1000 - 2 * 20  # at most a slice (2 % of rpm) each
    assert admitted + sum([await _drain(limiter, scope, 1, now) for limiter in replicas]) == 1000
    assert await _level(redis_raw, scope, b"r") < 1


async def test_a_large_tpm_holds_across_two_replicas_within_one_request_each(
        replicas: tuple[RedisRateLimiter, ...]) -> None:
    scope = LimitScope("key", "k_tpm", 0, 20_000, 0)
    now = time.time()
    admitted = await _burst(replicas, scope, 100, 260, now)
    assert admitted + _held(replicas, scope)[1] // 100 <= 200
    admitted += sum([await _drain(limiter, scope, 100, now) for limiter in replicas])
    # Never above 200 (20,000 / 100); below only by what each replica's slice keeps that is smaller
    # than one request (the documented slack: under one request's tokens per replica).
    assert 200 - len(replicas) <= admitted <= 200


async def test_concurrency_slots_leased_in_blocks_hold_exactly(replicas: tuple[RedisRateLimiter, ...],
                                                               redis_raw: aioredis.Redis) -> None:
    scope = LimitScope("tenant", "t", 0, 0, 100)
    now = time.time()
    admitted = await _burst(replicas, scope, 1, 150, now)
    assert admitted + _held(replicas, scope)[2] == 100
    assert admitted + sum([await _drain(limiter, scope, 1, now) for limiter in replicas]) == 100
    assert await redis_raw.zcard(scope_keys("t", scope)[1]) == 100


@pytest.mark.slow
async def test_unused_allowance_goes_back_after_idle(replicas: tuple[RedisRateLimiter, ...],
                                                     redis_raw: aioredis.Redis) -> None:
    one, _ = replicas
    scope = LimitScope("key", "k_idle", 0, 1_000_000, 100)
    started = time.time()
    big = await one.admit("t", (scope,), 500_000, "big", 60)  # far below full, so a give-back shows
    assert big.allowed
    first = await one.admit("t", (scope,), 1000, "a", 60)
    assert first.allowed
    await one.settle("t", (scope,), 0, "a", first.ticket)
    raw = await redis_raw.hgetall(scope_keys("t", scope)[0])
    left, at = float(raw[b"t"]), float(raw[b"ts"])
    lease = one._leases[("t", scope)]
    sliced = lease.tokens
    # A slice of tokens is held here; the bucket refills by 1,000,000/60 a second between writes, and a busy
    # machine spreads those writes out, so the refill since the first take is part of the bound.
    assert sliced >= 1000 and left <= 1_000_000 - 501_000 - sliced + 1000 + (at - started) * 1_000_000 / 60
    assert await redis_raw.zcard(scope_keys("t", scope)[1]) > 1  # and a block of slots (one still in use)
    await one.settle("t", (scope,), 0, "big", big.ticket)
    # Given back once idle: polled with a generous bound, not read after a fixed sleep (a busy machine is late).
    deadline = time.monotonic() + SETTLE_S + 10.0
    while lease.tokens or lease.slots or await redis_raw.zcard(scope_keys("t", scope)[1]):
        assert time.monotonic() < deadline, "the unused allowance never went back"
        await asyncio.sleep(0.05)
    raw = await redis_raw.hgetall(scope_keys("t", scope)[0])
    refill = (float(raw[b"ts"]) - at) * 1_000_000 / 60
    assert float(raw[b"t"]) == pytest.approx(left + refill + sliced)
    assert lease.tokens == 0 and not lease.slots
    assert await redis_raw.zcard(scope_keys("t", scope)[1]) == 0


async def test_a_dead_replicas_slots_free_after_their_lease(replicas: tuple[RedisRateLimiter, ...]) -> None:
    dead, alive = replicas
    scope = LimitScope("tenant", "t", 0, 0, 40)
    now = time.time()
    assert (await dead.admit("t", (scope,), 1, "d", 60, now)).allowed
    held = len(dead._leases[("t", scope)].slots)
    assert held > 1
    assert dead._keeper is not None
    dead._keeper.cancel()  # it dies: no renewal, no give-back
    assert await _burst((alive,), scope, 1, 60, now) + await _drain(alive, scope, 1, now) == 40 - held
    assert not (await alive.admit("t", (scope,), 1, "x", 60, now + SLOT_LEASE_S - 1)).allowed
    assert (await alive.admit("t", (scope,), 1, "x", 60, now + SLOT_LEASE_S + 1)).allowed


async def test_a_correction_above_the_estimate_is_in_redis_when_settle_returns(
        replicas: tuple[RedisRateLimiter, ...], redis_raw: aioredis.Redis) -> None:
    """Regression (issue 45): the correction used to wait in the process for up to 1 s, and another
    replica admitted against a bucket that did not show it. Now the slice pays what it can and the
    settle's script call takes the rest before it returns; a bucket left below zero takes the slice back."""
    one, two = replicas
    scope = LimitScope("key", "k_fix", 0, 100_000, 0)
    first = await one.admit("t", (scope,), 1000, "a", 60)
    assert first.allowed
    lease = one._leases[("t", scope)]
    slice_ = lease.tokens
    assert slice_ >= 1000  # leased far from the limit
    await one.settle("t", (scope,), 30_000, "a", first.ticket)  # the usage was far above the estimate
    refill = 100_000 / 60 * 2  # at most 2 s of refill on a busy machine
    level = await _level(redis_raw, scope, b"t")
    assert level <= 100_000 - 1000 - 30_000 + refill, level  # the slice paid part, Redis holds the rest
    assert lease.tokens == 0  # the slice paid first
    # Another replica drives the bucket below zero; the first learns it with its next settle and
    # gives its unspent slice back instead of admitting on it.
    second = await two.admit("t", (scope,), 1000, "b", 60)
    assert second.allowed
    await two.settle("t", (scope,), 90_000, "b", second.ticket)
    assert await _level(redis_raw, scope, b"t") < 0
    third = await one.admit("t", (scope,), 1000, "c", 60)
    assert not third.allowed  # the bucket is in debt: refused on every replica


@pytest.mark.slow
async def test_a_give_back_reaches_redis_within_the_window(replicas: tuple[RedisRateLimiter, ...],
                                                           redis_raw: aioredis.Redis) -> None:
    one, _ = replicas
    scope = LimitScope("key", "k_back", 0, 100_000, 0)
    first = await one.admit("t", (scope,), 30_000, "a", 60)
    assert first.allowed
    started = time.monotonic()
    await one.settle("t", (scope,), -29_000, "a", first.ticket)  # the estimate was far above the usage
    # Held back here (only stricter meanwhile), then given back: polled with a generous bound.
    deadline = started + 10.0
    while True:
        level = await _level(redis_raw, scope, b"t")
        if level > 90_000:
            break
        assert time.monotonic() < deadline, f"the give-back never reached Redis (level {level})"
        await asyncio.sleep(0.05)


async def test_headers_on_local_admissions_count_down(replicas: tuple[RedisRateLimiter, ...]) -> None:
    one, _ = replicas
    scope = LimitScope("key", "k_head", 600, 100_000, 0)
    first = await one.admit("t", (scope,), 10, "a", 60)
    second = await one.admit("t", (scope,), 10, "b", 60)  # from the slice: no round trip
    assert first.requests is not None and second.requests is not None
    assert second.requests.remaining == first.requests.remaining - 1 == 598
    assert second.tokens is not None and second.tokens.remaining == 100_000 - 20
    names = [name for name, _ in raw_headers(second)]
    assert names == [b"x-ratelimit-limit-requests", b"x-ratelimit-remaining-requests", b"x-ratelimit-reset-requests",
                     b"x-ratelimit-limit-tokens", b"x-ratelimit-remaining-tokens", b"x-ratelimit-reset-tokens"]


async def test_small_limits_never_lease(replicas: tuple[RedisRateLimiter, ...], redis_raw: aioredis.Redis) -> None:
    one, _ = replicas
    scope = LimitScope("key", "k_small", 99, 9_999, 39)
    assert (await one.admit("t", (scope,), 10, "a", 60)).allowed
    lease = one._leases[("t", scope)]
    assert lease.requests == lease.tokens == 0 and not lease.slots
    assert await _level(redis_raw, scope, b"r") == pytest.approx(98, abs=0.1)
    assert await redis_raw.zrange(scope_keys("t", scope)[1], 0, -1) == [b"a"]


@pytest.mark.slow
# Redis deployments only: memory:// keeps its buckets in the process, so nothing is leased there.
@pytest.mark.parametrize("store_factory", ["redis", "redis-tls-acl", "redis-cluster"], indirect=True)
async def test_leasing_in_every_redis_deployment(store_factory: StoreFactory) -> None:
    """The slices, the slot blocks and the give-back at shutdown on one server, behind TLS+ACL and on a Cluster."""
    stores = [await store_factory(), await store_factory()]
    assert stores[0].kind == "redis"
    limiters = tuple(open_limiter(store) for store in stores)
    assert all(isinstance(limiter, RedisRateLimiter) for limiter in limiters)
    replicas = tuple(limiter for limiter in limiters if isinstance(limiter, RedisRateLimiter))
    scope = LimitScope("key", "k_everywhere", 1000, 0, 100)
    now = time.time()
    admitted = await _burst(replicas, scope, 1, 100, now)
    held = _held(replicas, scope)[2]
    # Every slot Redis counts is admitted or held unused by a replica (none lost, none twice); the
    # only slack is what a replica holds, or gave back after IDLE_S when a loaded machine stalled
    # the burst that long (a refusal while allowance sat idle elsewhere, as documented).
    taken = await stores[0].io.client.zcard(scope_keys("t", scope)[1])  # type: ignore[attr-defined]
    assert taken == admitted + held <= 100
    assert _held(replicas, scope)[0] >= 1  # requests were leased beyond those admitted
    await replicas[0].aclose()
    await replicas[1].aclose()  # both gave back what they held: only the 100 admitted stay taken
    again = RedisRateLimiter(stores[0].io)  # type: ignore[arg-type]
    verdict = await again.admit("t", (LimitScope("key", "k_everywhere", 1000, 0, 0),), 1, "x", 60, now)
    assert verdict.requests is not None and verdict.requests.remaining >= 1000 - admitted - 1 - 20
    await again.aclose()


def _rate_limits(limiter: RedisRateLimiter) -> Any:
    from gateway.config.loader import parse_config
    from gateway.governance.admission import RateLimits

    config = parse_config('providers: {p: {type: openai, base_url: "http://127.0.0.1:9/v1", api_key: x}}\n'
                          "models: {m: {targets: [{provider: p, model: m}]}}\n")
    return RateLimits(limiter, config)


async def _admit(limits: Any, key: Any, body_bytes: int) -> Any:
    """``RateLimits.admit``'s admission, awaited when the store decides."""
    admitted = limits.admit(key, body_bytes)
    if inspect.iscoroutine(admitted):
        admitted = await admitted
    assert admitted is not None
    return admitted


async def _finish(admission: Any) -> None:
    pending = admission.finish(None)
    if pending is not None:
        await pending


async def test_requests_a_lease_covers_are_admitted_and_settled_without_a_coroutine(
        replicas: tuple[RedisRateLimiter, ...], redis_raw: aioredis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.canonical import Usage
    from gateway.config.model import ApiKey
    from gateway.governance.admission import Admission

    # What is checked is admission from a held lease; a loaded machine that pauses this test past IDLE_S would have
    # the keeper give the lease back (its own test) and send the second admission to the store.
    monkeypatch.setattr("gateway.store.limits.redis.IDLE_S", 60.0)
    one, _ = replicas
    limits = _rate_limits(one)
    key = ApiKey(key="", tenant="t", id="k_sync", rpm=6_000, tpm=1_000_000, max_concurrent=100)
    pending = limits.admit(key, 400)
    assert inspect.iscoroutine(pending)  # nothing leased yet: the store decides
    first = await pending
    assert first is not None
    calls = _count_calls(one)
    second = limits.admit(key, 400)  # from the slice
    assert isinstance(second, Admission) and calls == []
    assert dict(second.headers)[b"x-ratelimit-remaining-requests"] == b"%d" % (6_000 - 2)
    assert dict(second.headers)[b"x-ratelimit-remaining-tokens"] == b"%d" % (1_000_000 - 2 * 101)
    lease = one._leases[("t", limits.scopes(key)[0][0])]
    assert lease.in_flight == 2
    assert second.finish(Usage(prompt_tokens=30, completion_tokens=11)) is None  # leased: settled here
    assert second.finish(None) is None and lease.in_flight == 1 and lease.debt == 41 - 101  # once only
    assert first.finish(None) is None
    assert lease.in_flight == 0 and calls == []


async def test_a_per_request_slot_is_freed_by_the_coroutine_finish_returns(
        replicas: tuple[RedisRateLimiter, ...], redis_raw: aioredis.Redis) -> None:
    from gateway.config.model import ApiKey

    one, _ = replicas
    limits = _rate_limits(one)
    key = ApiKey(key="", tenant="t", id="k_exact", max_concurrent=3)  # small: never leased, exact per request
    admission = await _admit(limits, key, 40)
    slots = scope_keys("t", limits.scopes(key)[0][0])[1]
    assert await redis_raw.zcard(slots) == 1
    remote = admission.finish(None)
    assert remote is not None and await redis_raw.zcard(slots) == 1
    await remote
    assert await redis_raw.zcard(slots) == 0
    assert admission.finish(None) is None


async def test_memory_limits_decide_and_refuse_without_a_coroutine() -> None:
    from gateway.config.model import ApiKey
    from gateway.errors import GatewayError
    from gateway.governance.admission import Admission
    from gateway.store.limits.memory import MemoryRateLimiter

    limits = _rate_limits(MemoryRateLimiter())  # type: ignore[arg-type]
    key = ApiKey(key="", tenant="t", id="k_mem", rpm=2)
    admitted = [limits.admit(key, 40) for _ in range(2)]
    assert all(isinstance(a, Admission) for a in admitted)
    with pytest.raises(GatewayError) as refused:
        limits.admit(key, 40)
    assert refused.value.status == 429 and refused.value.headers["retry-after"] == "30"


async def test_a_key_and_its_tenant_both_limited_are_taken_together_from_their_leases(
        replicas: tuple[RedisRateLimiter, ...]) -> None:
    """Two scopes skip the one-scope shortcut and are taken from both leases at once."""
    from gateway.config.loader import parse_config
    from gateway.config.model import ApiKey
    from gateway.governance.admission import Admission, RateLimits

    one, _ = replicas
    config = parse_config('providers: {p: {type: openai, base_url: "http://127.0.0.1:9/v1", api_key: x}}\n'
                          "models: {m: {targets: [{provider: p, model: m}]}}\n"
                          "tenants: {t: {rpm: 3000}}\n")
    limits = RateLimits(one, config)
    key = ApiKey(key="", tenant="t", id="k_two", rpm=6_000)
    pending = limits.admit(key, 40)
    assert inspect.iscoroutine(pending) and await pending is not None
    calls = _count_calls(one)
    admission = limits.admit(key, 40)
    assert isinstance(admission, Admission) and calls == []
    # the tighter of the two buckets: the tenant's 3,000, two requests taken
    assert dict(admission.headers)[b"x-ratelimit-limit-requests"] == b"3000"
    assert dict(admission.headers)[b"x-ratelimit-remaining-requests"] == b"2998"


@pytest.mark.parametrize(("limits", "state", "tokens", "covered"), [
    ((10_000, 0, 0), {"requests": 1.0}, 5, True),
    ((10_000, 0, 0), {"requests": 0.5}, 5, False),  # less than one request left
    ((0, 100_000, 0), {"tokens": 50.0}, 50, True),
    ((0, 100_000, 0), {"tokens": 49.0}, 50, False),
    ((0, 0, 1_000), {"slots": ["a"], "in_flight": 0}, 1, True),
    ((0, 0, 1_000), {"slots": ["a"], "in_flight": 1}, 1, False),  # every leased slot in use
    ((10_000, 100_000, 1_000), {"requests": 3.0, "tokens": 10.0, "slots": ["a"]}, 11, False),
])
def test_take_if_covered_takes_all_or_nothing_as_covers_and_take_do(
        limits: tuple[int, int, int], state: dict[str, object], tokens: int, covered: bool) -> None:
    scope = LimitScope("key", "k", *limits)
    one, two = Lease(scope, [], "p:"), Lease(scope, [], "p:")
    for lease in (one, two):
        lease.last_used = 0.0
        for name, value in state.items():
            setattr(lease, name, list(value) if isinstance(value, list) else value)
    assert one.covers(tokens) is covered
    if covered:
        one.take(tokens, 5.0)
    assert two.take_if_covered(tokens, 5.0) is covered
    fields = ("requests", "tokens", "in_flight", "last_used")
    assert [getattr(two, name) for name in fields] == [getattr(one, name) for name in fields]


async def test_a_forgotten_lease_is_retired_and_the_next_request_takes_from_its_successor(
        replicas: tuple[RedisRateLimiter, ...], redis_raw: aioredis.Redis) -> None:
    from gateway.config.model import ApiKey
    from gateway.governance.admission import Admission
    from gateway.store.limits.redis import _FORGET_S

    one, _ = replicas
    limits = _rate_limits(one)
    key = ApiKey(key="", tenant="t", id="k_forget", rpm=6_000, max_concurrent=100)
    began = time.monotonic()
    await _finish(await _admit(limits, key, 40))
    held = limits.admit(key, 40)  # straight from the lease RateLimits keeps for the key
    assert isinstance(held, Admission)
    await _finish(held)
    scope = limits.scopes(key)[0][0]
    old = one._leases[("t", scope)]
    await one._tidy_all(closing=True)  # everything leased goes back to Redis
    old.last_used -= _FORGET_S + 1
    await one._tidy_all(closing=False)  # idle and holding nothing: forgotten
    assert old.retired and ("t", scope) not in one._leases
    pending = limits.admit(key, 40)
    assert inspect.iscoroutine(pending)  # the retired lease is not used; its successor holds nothing yet
    admitted = await pending
    assert admitted is not None
    await _finish(admitted)
    again = limits.admit(key, 40)
    assert isinstance(again, Admission)
    successor = one._leases[("t", scope)]
    assert successor is not old and successor.in_flight == 1 and old.in_flight == 0
    assert one._leases_of("t", limits.scopes(key)[0])[0] is successor  # not the retired lease
    # Four requests taken; the bucket refills 100 a second meanwhile (a slow machine sees a few back).
    remaining = int(dict(again.headers)[b"x-ratelimit-remaining-requests"])
    assert 6_000 - 4 <= remaining <= 6_000 - 4 + math.ceil((time.monotonic() - began) * 100), remaining
    await _finish(again)
    assert successor.in_flight == 0


async def test_a_given_back_estimate_never_lifts_a_bucket_above_its_limit(
        replicas: tuple[RedisRateLimiter, ...], redis_raw: aioredis.Redis) -> None:
    """Regression (issue 29): an estimate far above the usage is given back as a negative correction
    that rides along with the replica's next script call; it was added after the refill's cap, so a
    bucket that had refilled meanwhile went past its limit (``x-ratelimit-remaining-tokens``
    1,000,918 for a limit of 1,000,000 after an rpm burst on two replicas)."""
    scope = LimitScope("key", "k_refund", 1000, 1_000_000, 0)
    now = time.time()
    for wave in range(3):
        at = now + 2 * wave  # the bucket refills fully between waves (passed in: no sleeping)
        # Estimates above a token slice: each take is a script call; the usage is 10 tokens.
        big = await asyncio.gather(*(replicas[i % 2].admit("t", (scope,), 30_000, f"w{wave}b{i}", 60, at)
                                     for i in range(6)))
        for i, decision in enumerate(big):
            assert decision.allowed
            await replicas[i % 2].settle("t", (scope,), -29_990, f"w{wave}b{i}", decision.ticket)
        # The next requests (the corrections ride along) see a full bucket, never more.
        later = await asyncio.gather(*(replicas[i % 2].admit("t", (scope,), 10, f"w{wave}s{i}", 60, at + 1.9)
                                       for i in range(40)))
        for decision in [*big, *later]:
            assert decision.allowed and decision.level_t <= 1_000_000 and decision.level_r <= 1000
            assert decision.tokens is not None and decision.tokens.remaining <= 1_000_000
            shown = dict(raw_headers(decision))
            assert int(shown[b"x-ratelimit-remaining-tokens"]) <= 1_000_000
            assert int(shown[b"x-ratelimit-remaining-requests"]) <= 1000
    assert await _level(redis_raw, scope, b"t") <= 1_000_000


async def test_memory_refund_never_lifts_a_bucket_above_its_limit() -> None:
    from gateway.store.limits.memory import MemoryRateLimiter

    limiter = MemoryRateLimiter()
    scope = LimitScope("key", "k_mem", 0, 1000, 0)
    now = time.time()
    taken = limiter.admit("t", (scope,), 10, "a", 60, now)
    limiter.settle("t", (scope,), -500, "a", taken.ticket)  # more given back than was taken
    assert limiter._buckets[("key", "k_mem")][1] <= 1000
    assert limiter.admit("t", (scope,), 1, "b", 60, now).level_t <= 1000
