"""The notification outbox, on the memory store, a real Redis and a real Redis Cluster."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from gateway.store.base import Store
from gateway.store.outbox.base import now_ms

StoreFactory = Callable[..., Awaitable[Store]]
KINDS = pytest.mark.parametrize("store_factory",
                                ["memory", "redis", pytest.param("redis-cluster", marks=pytest.mark.slow)],
                                indirect=True)


@KINDS
async def test_each_job_is_claimed_by_one_replica(store_factory: StoreFactory) -> None:
    replicas = [(await store_factory()).outbox("test") for _ in range(3)]
    due = now_ms()
    assert await replicas[0].push([(f"job-{i}", due, f"body-{i}".encode()) for i in range(150)], 1000) == 0
    taken: list[str] = []

    async def drain(outbox: object) -> None:
        while True:
            claimed = await outbox.claim(60_000, 7)  # type: ignore[attr-defined]
            if not claimed:
                return
            for job in claimed:
                assert job.body == f"body-{job.id.removeprefix('job-')}".encode()
                taken.append(job.id)
                assert await outbox.done(job.id, job.token)  # type: ignore[attr-defined]

    await asyncio.gather(*(drain(o) for o in replicas))
    assert sorted(taken) == sorted(f"job-{i}" for i in range(150))  # every job once, none twice
    assert await replicas[0].size() == 0


@KINDS
async def test_a_lease_hides_a_job_until_it_ends(store_factory: StoreFactory) -> None:
    first, second = (await store_factory()).outbox("test"), (await store_factory()).outbox("test")
    await first.push([("j", now_ms(), b"x")], 10)
    [held] = await first.claim(60_000, 10)
    assert await second.claim(60_000, 10) == []  # leased by the first replica
    assert await first.retry("j", held.token, now_ms() - 1, b"y")  # put back, due at once
    [again] = await second.claim(1, 10)  # a 1 ms lease: as if this replica died holding it
    assert again.body == b"y"
    deadline = time.monotonic() + 5
    while not (reclaimed := await first.claim(60_000, 10)) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    [taken_over] = reclaimed
    assert taken_over.token != again.token
    assert not await second.done("j", again.token)  # its claim was lost: it cannot remove the job
    assert not await second.retry("j", again.token, now_ms(), b"z")
    assert await first.done("j", taken_over.token)
    assert await first.size() == 0


@KINDS
async def test_retry_schedules_and_the_cap_refuses_new_jobs(store_factory: StoreFactory) -> None:
    outbox = (await store_factory()).outbox("test")
    now = now_ms()
    assert await outbox.push([("a", now, b"1"), ("b", now, b"2"), ("c", now, b"3")], 2) == 1
    assert await outbox.push([("a", now + 60_000, b"1b")], 2) == 0  # replacing a job is not a new one
    [job] = await outbox.claim(60_000, 10)
    assert (job.id, job.body) == ("b", b"2")  # "a" was moved into the future
    assert await outbox.retry("b", job.token, now_ms() + 60_000, b"2b")
    assert await outbox.claim(60_000, 10) == []
    assert await outbox.size() == 2
