"""Budget reservations in the store: atomic across replicas, given back with the usage, ended by their lease."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator

import pytest

from gateway.store.redis import RedisStore
from gateway.store.usage.base import UsageDelta, UsageStore, Want
from gateway.store.usage.memory import MemoryUsage
from gateway.store.usage.redis import RedisUsage
from tests.usage.redis_access import REDIS_URL, flushed_redis

WANTS = [Want("key", "day", False, 1000), Want("tenant", "month", False, 5000)]


@pytest.fixture(params=["memory", "redis"])
async def replicas(request: pytest.FixtureRequest) -> AsyncIterator[tuple[UsageStore, UsageStore]]:
    """Two usage stores on one backend: on Redis two replicas (their own connections, their own holds)."""
    if request.param == "memory":
        one = MemoryUsage()
        yield one, one
        return
    client = await flushed_redis()
    # fail_open_timeout: a starved event loop on a busy machine must not turn a decision into a fail-open.
    first, second = RedisStore(REDIS_URL, fail_open_timeout=1.0), RedisStore(REDIS_URL, fail_open_timeout=1.0)
    yield RedisUsage(first.io, flush_s=0.01), RedisUsage(second.io, flush_s=0.01)
    await client.flushdb()
    await client.aclose()
    await first.aclose()
    await second.aclose()


async def test_a_burst_on_two_replicas_reserves_up_to_the_budget_and_no_further(
        replicas: tuple[UsageStore, UsageStore]) -> None:
    now = time.time()
    outcomes = await asyncio.gather(*(
        replicas[i % 2].reserve("t", "k", WANTS, 100, 0, f"r{i}", 60, now) for i in range(40)))
    admitted = [i for i, (refused, _, _) in enumerate(outcomes) if refused < 0]
    assert len(admitted) == 10, "1,000 tokens of budget, 100 reserved per request: ten, wherever they ran"
    refused = [outcome for outcome in outcomes if outcome[0] >= 0]
    assert all(index == 0 and reserved[0].tokens >= 1000 for index, _, reserved in refused)
    # Each request records its usage and gives its reservation back in the same write.
    for i in admitted:
        assert replicas[i % 2].add_now("t", "k", (1, 0, 60, 20, 0, 0, 0, 0), now, release=f"r{i}")
    for store in replicas:
        await store.drain(5)
    refused_now, spent, reserved = await replicas[0].reserve("t", "k", WANTS, 100, 0, "late", 60, now)
    assert refused_now == -1 and spent[0].tokens == 800 and reserved[0].tokens == 0
    assert spent[1].tokens == 800


#: the lost reservation's lease: Redis ends it in real time (its keys' TTL), so it must outlast the next
#: call on a busy machine (at 50 ms, it did not)
LEASE_S = 3.0


@pytest.mark.slow
async def test_a_reservation_never_given_back_ends_with_its_lease(replicas: tuple[UsageStore, UsageStore]) -> None:
    now = time.time()
    assert (await replicas[0].reserve("t", "k", WANTS, 1000, 0, "lost", LEASE_S, now))[0] == -1
    assert (await replicas[1].reserve("t", "k", WANTS, 100, 0, "next", 60, now))[0] == 0, "the budget is held"
    deadline = time.monotonic() + LEASE_S + 30
    while (await replicas[1].reserve("t", "k", WANTS, 100, 0, "next", 60, time.time()))[0] != -1:
        assert time.monotonic() < deadline, "the lost reservation never ended"
        await asyncio.sleep(0.02)


async def test_a_release_whose_write_failed_goes_again_and_the_budget_opens() -> None:
    """The write of a request's usage and the release of its reservation failed (here: Redis refuses the
    gateway's scripts, as an ACL change or a failover can): the counts are dropped (a hung store may still
    apply them; twice would overcount), the release is not: sent again, it gives the budget back. Before, a
    new key's 4,096-token reservation stayed until its lease ended, shutting a 1,000-token budget."""
    client = await flushed_redis()
    user = f"loopgate-release-{os.getpid()}"
    await client.acl_setuser(user, enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all"])
    store = RedisStore(REDIS_URL, username=user, password="pw", fail_open_timeout=1.0)
    usage = RedisUsage(store.io, flush_s=0.05)
    failures: list[str] = []
    usage.on_error = lambda op, cause: failures.append(op)
    try:
        now = time.time()
        assert (await usage.reserve("t", "k", WANTS, 4096, 0, "new-key-1", 3600, now))[0] == -1
        # enabled=True: redis-py's default (False) would also disable the user, so that only connections opened
        # before could still work, and which ones those are is the client's business, not this test's.
        await client.acl_setuser(user, enabled=True, commands=["-eval", "-evalsha"])
        assert usage.add_now("t", "k", UsageDelta(requests=1, prompt_tokens=20, completion_tokens=5).values(),
                             now, "new-key-1")
        deadline = time.monotonic() + 10
        while not failures:
            assert time.monotonic() < deadline, "the write never failed"
            await asyncio.sleep(0.01)
        await client.acl_setuser(user, enabled=True, commands=["+eval", "+evalsha"])
        held = [-1]
        while held != [0, 0]:  # the key's day row and the tenant's month row
            assert time.monotonic() < deadline + 10, f"the reservation was never given back: {held}"
            await asyncio.sleep(0.02)
            held = [int(await client.hget(name, "t") or 0) async for name in client.scan_iter("*{u:t}*:rh")]
        assert (await usage.reserve("t", "k", WANTS, 100, 0, "next", 60, time.time()))[0] == -1
    finally:
        await client.acl_deluser(user)
        await client.flushdb()
        await client.aclose()
        await store.aclose()
