"""``RedisIO.guard``'s deadlines (redis_client/deadlines.py): one timer per length, asyncio.timeout's rules."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.store.errors import StoreUnavailable
from gateway.store.redis_client.client import RedisIO


@pytest.fixture
async def io() -> RedisIO:
    # Nothing connects: the guard is what is tested, its body an operation that takes its time.
    return RedisIO("redis://127.0.0.1:1/0", op_timeout=0.2, fail_open_timeout=0.05)


async def test_an_operation_past_its_deadline_is_store_unavailable_at_the_deadline(io: RedisIO) -> None:
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match=r"redis unavailable during slow: no answer within 0\.2s"):
        async with io.guard("slow"):
            await asyncio.sleep(5)
    assert 0.19 <= time.monotonic() - started < 1.0
    with pytest.raises(StoreUnavailable, match=r"no answer within 0\.05s"):
        async with io.guard("fails open", fail_open=True):  # its own length, its own queue
            await asyncio.sleep(5)


async def test_each_operation_gets_its_own_deadline_whatever_ended_before_it(io: RedisIO) -> None:
    async def quick() -> str:
        async with io.guard("quick"):
            await asyncio.sleep(0)
        return "done"

    async def slow(delay: float) -> float:
        await asyncio.sleep(delay)
        started = time.monotonic()
        try:
            async with io.guard("slow"):
                await asyncio.sleep(5)
        except StoreUnavailable:
            return time.monotonic() - started
        raise AssertionError("not cut off")

    # A deadline is cut off at its own time, not at the time of an earlier entry of the queue (done or not).
    results = await asyncio.gather(quick(), slow(0.0), slow(0.1), quick(), slow(0.15))
    assert results[0] == results[3] == "done"
    for waited in results[1:3] + results[4:]:
        assert 0.19 <= waited < 0.6, results
    for _ in range(3):  # nothing left over cancels a later operation that ends in time
        async with io.guard("after"):
            await asyncio.sleep(0.1)


async def test_an_operation_that_ends_in_time_is_never_cancelled_later(io: RedisIO) -> None:
    for _ in range(3):
        async with io.guard("in time"):
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.4)  # past every deadline above: the task goes on, uncancelled
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_cancellation_from_outside_stays_a_cancellation(io: RedisIO) -> None:
    entered = asyncio.Event()

    async def operation() -> None:
        async with io.guard("cancelled"):
            entered.set()
            await asyncio.sleep(5)

    task = asyncio.ensure_future(operation())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_store_error_inside_is_translated(io: RedisIO) -> None:
    with pytest.raises(StoreUnavailable, match=r"Error 111 connecting|Connect call failed|refused"):
        async with io.guard("refused"):
            await io.command("PING")
