"""Reported usage reaches the limits every replica shares, and a budget reserves the answer too (issue 45).

Two real gateway processes on one real Redis. tpm: a request's reported usage used to wait in the
replica that served it (up to a second), so the other replica admitted against a bucket that did
not show it (a 20,000 tpm key showed 19,567 left after spending 13,035, and a third request ran).
Budgets: a new key's reservation counted the prompt only, so 60 concurrent requests of a
10,000-token budget all ran (300,600 tokens spent).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.e2e.conftest import Gateway, gateway_config, two_replicas
from tests.fakes.upstream import FakeUpstream

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)
TPM = 20_000
USAGE = (35, 13_000)  # what the fake reports for every tpm request: 13,035 tokens
BUDGET = 10_000
ANSWER = 5_010  # completion tokens of every budget request
BURST = 60
AUTH = f"""auth:
  keys:
    - {{key: tpm-20k, tenant: tpm-t, tpm: {TPM}}}
    - {{key: budget-10k, tenant: budget-t, budget: {{limit: {BUDGET}, unit: tokens, period: day}}}}
"""


@pytest.fixture(scope="module")
def pair(fakes: dict[str, FakeUpstream]) -> Iterator[tuple[Gateway, Gateway]]:
    yield from two_replicas(gateway_config(fakes, store_url=REDIS_URL).replace("auth:\n  keys:\n", AUTH, 1),
                            REDIS_URL, flush_after=True)


def _chat(gw: Gateway, key: str, **extra: object) -> httpx.Response:
    return httpx.post(f"{gw.url}/v1/chat/completions", timeout=30, headers={"authorization": f"Bearer {key}"},
                      json={"model": "plain", "messages": [{"role": "user", "content": "hi"}], **extra})


def test_reported_usage_is_in_the_shared_bucket_before_the_answer(pair: tuple[Gateway, Gateway],
                                                                  slow_primary: Callable[..., None]) -> None:
    first, second = pair
    slow_primary(usage=USAGE)
    started = time.monotonic()
    one = _chat(first, "tpm-20k")
    assert one.status_code == 200, one.text
    assert one.json()["usage"]["total_tokens"] == sum(USAGE)
    two = _chat(second, "tpm-20k")
    assert two.status_code == 200, two.text
    # The other replica's admission saw the 13,035 tokens: what is left is 20,000 minus them and the two
    # estimates, plus the refill since the first request (20,000 a minute), never the 19,5xx it showed.
    refill = (time.monotonic() - started) * TPM / 60
    left = int(two.headers["x-ratelimit-remaining-tokens"])
    assert left <= TPM - sum(USAGE) + refill + 2, left
    # The bucket is now below zero (26,070 spent of 20,000): a third request is refused on either replica.
    for gw in pair:
        third = _chat(gw, "tpm-20k")
        assert third.status_code == 429, (third.status_code, third.text)
        assert third.json()["error"]["type"] == "tokens"
        assert int(third.headers["retry-after"]) >= 1


async def _burst(pair: tuple[Gateway, Gateway]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=30) as client:
        return list(await asyncio.gather(*(
            client.post(f"{pair[i % 2].url}/v1/chat/completions", headers={"authorization": "Bearer budget-10k"},
                        json={"model": "plain", "max_tokens": ANSWER,
                              "messages": [{"role": "user", "content": "write at length"}]})
            for i in range(BURST))))


def test_a_new_keys_budget_reserves_the_answer_across_replicas(pair: tuple[Gateway, Gateway],
                                                               slow_primary: Callable[..., None]) -> None:
    # Slow enough that the whole burst is in flight before the first request reports its usage.
    slow_primary(usage=(10, ANSWER), delay_s=1.0)
    answers = asyncio.run(_burst(pair))
    ran = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code == 429]
    assert len(ran) + len(refused) == BURST, [a.text for a in answers if a.status_code not in (200, 429)]
    spent = sum(a.json()["usage"]["total_tokens"] for a in ran)
    assert refused, (len(ran), spent)
    assert {a.json()["error"]["code"] for a in refused} == {"insufficient_quota"}
    # Each request reserved its prompt estimate plus its max_tokens (5,010): admission stops once spent
    # plus reserved reaches the budget, so at most one reservation's worth passes it.
    reservation = ANSWER + 40
    assert spent <= BUDGET + reservation, (spent, len(ran))
    # The third reservation finds 2 x ~5,040 reserved (or spent) >= 10,000: refused on either replica.
    assert 1 <= len(ran) <= 2, (len(ran), spent)
