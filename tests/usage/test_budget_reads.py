"""A budget row is read by one request at a time, however many requests check it at once."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.config.model import ApiKey, Budget
from gateway.errors import GatewayError
from gateway.store.usage.base import Period, Scope, Spent, UsageDelta
from gateway.store.usage.memory import MemoryUsage
from gateway.usage.budgets import REFRESH_S
from gateway.usage.meter import Metering
from gateway.usage.pricing import Pricing


class GatedUsage(MemoryUsage):
    """The in-process store, counting its budget reads and holding each until ``gate`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.gate = asyncio.Event()

    async def spent(self, tenant: str, key_id: str, wants: list[tuple[Scope, Period]], now: float) -> list[Spent]:
        self.reads += 1
        await self.gate.wait()
        return await super().spent(tenant, key_id, wants, now)


KEY = ApiKey(key="secret", tenant="t", id="k1", name="k1")


async def check(metering: Metering, key: ApiKey) -> None:
    """What the lifecycle does: judged at once where it can be, else the coroutine that reads first."""
    pending = metering.meter(key).check_budget()
    if pending is not None:
        await pending


async def _outcomes(metering: Metering, count: int) -> list[str]:
    async def one() -> str:
        try:
            await check(metering, KEY)
        except GatewayError as exc:
            return exc.code or ""
        return "ok"
    return list(await asyncio.gather(*(one() for _ in range(count))))


async def test_concurrent_checks_share_one_read_and_later_ones_use_the_last_reading() -> None:
    store = GatedUsage()
    metering = Metering(Pricing({}), store, frozenset({"t"}), {"t": Budget(limit=100)})
    pending = metering.meter(KEY).check_budget()
    assert pending is not None  # no reading yet: the store has to be read
    pending.close()
    await store.add("t", "k1", UsageDelta(requests=1, prompt_tokens=150), time.time())

    first = asyncio.ensure_future(_outcomes(metering, 10))
    await asyncio.sleep(0.01)
    assert store.reads == 1 and not first.done()  # nothing to judge on yet: the other nine wait for that read
    store.gate.set()
    assert await first == ["insufficient_quota"] * 10
    assert store.reads == 1
    with pytest.raises(GatewayError):  # a fresh reading: judged at once, no coroutine
        metering.meter(KEY).check_budget()
    other = ApiKey(key="other", tenant="u", id="k2", name="k2")
    assert metering.meter(other).check_budget() is None  # no budget at all

    # The reading gets old; the next read is under way while more requests arrive: they do not wait.
    for seen in metering._spent._seen.values():
        seen.read_at -= REFRESH_S
    store.gate.clear()
    reader = asyncio.ensure_future(check(metering, KEY))
    await asyncio.sleep(0.01)
    assert store.reads == 2
    assert await asyncio.wait_for(_outcomes(metering, 5), 1.0) == ["insufficient_quota"] * 5
    assert store.reads == 2
    store.gate.set()
    with pytest.raises(GatewayError):
        await reader


async def test_a_cancelled_waiter_does_not_cancel_the_read_of_the_others() -> None:
    store = GatedUsage()
    metering = Metering(Pricing({}), store, frozenset({"t"}), {"t": Budget(limit=100)})
    reader = asyncio.ensure_future(check(metering, KEY))
    await asyncio.sleep(0.01)
    waiter = asyncio.ensure_future(check(metering, KEY))
    other = asyncio.ensure_future(check(metering, KEY))
    await asyncio.sleep(0.01)
    waiter.cancel()
    store.gate.set()
    await asyncio.wait_for(asyncio.gather(reader, other), 1.0)  # under the budget: both let through
    assert waiter.cancelled() and store.reads == 1
