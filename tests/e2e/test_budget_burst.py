"""A concurrent burst against a budget on two replicas stops at the budget: each request reserves its
estimate in the store first, so the overshoot is at most what the admitted requests spend above it.

Before reservations, every request of the burst was judged on the same reading (nothing spent yet):
against a 1,000-token budget 40 requests of 100 tokens all ran, 4,000 tokens.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import httpx
import pytest
import redis

from tests.e2e.conftest import Gateway, gateway_config, require_redis
from tests.fakes.upstream import FakeUpstream, Reply

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)
BUDGET = 1000
PER_REQUEST = 100  # tokens the fake reports for each request (60 prompt + 40 completion)
BURST = 40
KEYS = f"""auth:
  keys:
    - {{key: burst-key, tenant: burst, budget: {{limit: {BUDGET}, unit: tokens, period: day}}}}
"""
#: a prompt the estimate (body bytes / 4) reads as a little more than the 100 tokens the fake reports
PROMPT = "x" * 400


@pytest.fixture
def replicas(fakes: dict[str, FakeUpstream]) -> Iterator[tuple[Gateway, Gateway]]:
    require_redis(REDIS_URL)
    redis.Redis.from_url(REDIS_URL).flushdb()
    saved = fakes["primary"].default
    # Slow enough that the whole burst is in flight before the first request reports its usage.
    fakes["primary"].default = Reply(text="ok", usage=(60, 40), delay_s=0.5)
    config = gateway_config(fakes, store_url=REDIS_URL).replace("auth:\n  keys:\n", KEYS, 1)
    first, second = Gateway(config).start(), Gateway(config).start()
    try:
        yield first, second
    finally:
        fakes["primary"].default = saved
        first.stop()
        second.stop()


async def _burst(gateways: tuple[Gateway, Gateway]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=30) as client:
        return list(await asyncio.gather(*(
            client.post(f"{gateways[i % 2].url}/v1/chat/completions",
                        json={"model": "plain", "max_tokens": 40,
                              "messages": [{"role": "user", "content": PROMPT}]},
                        headers={"authorization": "Bearer burst-key"})
            for i in range(BURST))))


def test_a_burst_on_two_replicas_stays_within_the_budget_plus_what_is_in_flight(
        replicas: tuple[Gateway, Gateway]) -> None:
    answers = asyncio.run(_burst(replicas))
    ran = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code == 429]
    assert len(ran) + len(refused) == BURST, [a.text for a in answers if a.status_code not in (200, 429)]
    assert {a.json()["error"]["code"] for a in refused} == {"insufficient_quota"}
    spent = sum(a.json()["usage"]["total_tokens"] for a in ran)
    # Each admitted request reserved about 156 tokens (its prompt estimate and its max_tokens: the key has
    # no history yet) and spent 100: the budget is never crossed by more
    # than one request's spending (the overshoot bound: what requests admitted before it ran out spend
    # above their estimates, none here).
    assert spent <= BUDGET + PER_REQUEST, (spent, len(ran))
    assert len(ran) >= BUDGET // (len(PROMPT) // 4 + 40) - 1, "the budget was used, not refused early"
    refused_text = refused[0].json()["error"]["message"]
    assert "in flight" in refused_text or "has used" in refused_text
