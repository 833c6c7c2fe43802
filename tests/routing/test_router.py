"""The failover walk against real local upstreams: deadline rules, retries and the circuit breaker.

The router runs in-process with the real upstream pool; providers are fake HTTP servers on
127.0.0.1 (``tests/fakes``). Time bounds are generous and behavioural ("moved on long before
the retries would have ended"), never micro-benchmarks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.canonical import ModelRequest
from gateway.config.model import ProviderConfig, RoutingConfig, TargetConfig
from gateway.providers.base import ErrorClass
from gateway.routing.health import TargetHealth
from gateway.routing.router import AllTargetsFailed, Answer, Attempt, ResolvedTarget, Router
from gateway.upstream.pool import UpstreamPool
from gateway.upstream.timeouts import Timeouts
from tests.fakes.stalling import StallingUpstream
from tests.fakes.upstream import FakeUpstream, Reply
from tests.routing.conftest import HealthClock

REQUEST = ModelRequest(messages=[{"role": "user", "content": "hi"}])


@dataclass
class Upstreams:
    a: FakeUpstream
    b: FakeUpstream
    silent: StallingUpstream
    drip: StallingUpstream

    def all(self) -> dict[str, FakeUpstream | StallingUpstream]:
        return {"a": self.a, "b": self.b, "silent": self.silent, "drip": self.drip}


@pytest.fixture(scope="module")
def upstreams() -> Iterator[Upstreams]:
    started = Upstreams(FakeUpstream(), FakeUpstream(), StallingUpstream("silent"),
                        StallingUpstream("drip", interval_s=0.1, for_s=10.0))
    for upstream in started.all().values():
        upstream.start()
    yield started
    for upstream in started.all().values():
        upstream.stop()


@pytest.fixture(autouse=True)
def _fresh(upstreams: Upstreams) -> None:
    for upstream in upstreams.all().values():
        upstream.reset()


@asynccontextmanager
async def router_for(upstreams: Upstreams, *, timeout_s: float = 1.0, connect_timeout_s: float = 0.5,
                     breaker_failures: int = 1000, cooldown_s: float = 30.0) -> AsyncIterator[Router]:
    providers = {name: ProviderConfig(name=name, type="openai", base_url=upstream.url, api_key="k",
                                      timeouts=Timeouts(connect=connect_timeout_s, read=timeout_s))
                 for name, upstream in upstreams.all().items()}
    pool = UpstreamPool(providers)
    policy = RoutingConfig(backoff_base_s=0.01, backoff_max_s=0.05, breaker_failures=breaker_failures,
                           breaker_cooldown_s=cooldown_s)
    try:
        yield Router(providers, policy, pool, TargetHealth(breaker_failures, cooldown_s))
    finally:
        await pool.aclose()


def route(router: Router, *names: str) -> tuple[ResolvedTarget, ...]:
    return router.resolve([TargetConfig(name, "m") for name in names])


async def call(router: Router, targets: tuple[ResolvedTarget, ...], attempts: list[Attempt], *, stream: bool,
               retries: int = 0, budget_s: float = 10.0) -> Answer:
    deadline = time.monotonic() + budget_s
    if not stream:
        return await router.complete(targets, REQUEST, attempts, retries, deadline)
    answer = None
    async for item in router.stream(targets, REQUEST, attempts, retries, deadline):
        if isinstance(item, Answer):
            answer = item
    assert answer is not None
    return answer


def classes(attempts: list[Attempt]) -> list[tuple[str, Any]]:
    return [(entry["target"], entry["error_class"]) for entry in attempts]


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
async def test_a_target_that_never_answers_is_not_retried(upstreams: Upstreams, stream: bool) -> None:
    async with router_for(upstreams, timeout_s=0.5) as router:
        attempts: list[Attempt] = []
        started = time.monotonic()
        answer = await call(router, route(router, "silent", "b"), attempts, stream=stream, retries=3)
        elapsed = time.monotonic() - started
    assert answer.target.label == "b:m"
    assert classes(attempts) == [("silent:m", "timeout"), ("b:m", None)]
    # One request, so no retry was spent on it (counted, not timed: a busy machine is slow, not retrying).
    assert upstreams.silent.requests == 1, "no response byte: the next target at once, no retries"
    assert elapsed >= 0.45, "it was left after its head timeout, not before"


@pytest.mark.slow
async def test_retries_stop_when_the_deadline_cannot_also_cover_the_next_target(
        upstreams: Upstreams) -> None:
    slow_failure = Reply(status=500, delay_s=0.6)
    upstreams.a.queue(slow_failure, slow_failure, slow_failure)
    async with router_for(upstreams, connect_timeout_s=1.0) as router:
        attempts: list[Attempt] = []
        # After 0.6 s, a retry as slow (0.6 s) plus the fallback's 1 s connect timeout overshoots 2 s.
        answer = await call(router, route(router, "a", "b"), attempts, stream=False, retries=2, budget_s=2.0)
    assert answer.target.label == "b:m"
    assert classes(attempts) == [("a:m", "server_error"), ("b:m", None)]
    assert len(upstreams.a.requests) == 1


async def test_retries_still_happen_when_the_deadline_covers_them(upstreams: Upstreams) -> None:
    upstreams.a.queue(Reply(status=500, delay_s=0.2), Reply(status=500))
    async with router_for(upstreams, connect_timeout_s=1.0) as router:
        attempts: list[Attempt] = []
        answer = await call(router, route(router, "a", "b"), attempts, stream=True, retries=2)
    assert answer.target.label == "a:m"
    assert classes(attempts) == [("a:m", "server_error"), ("a:m", "server_error"), ("a:m", None)]


async def test_a_timeout_the_upstream_answered_with_is_retried(upstreams: Upstreams) -> None:
    upstreams.a.queue(Reply(status=504))
    async with router_for(upstreams) as router:
        attempts: list[Attempt] = []
        answer = await call(router, route(router, "a", "b"), attempts, stream=False, retries=1)
    assert answer.target.label == "a:m", "a 504 is an answer: the target is reachable, a retry may succeed"
    assert classes(attempts) == [("a:m", "timeout"), ("a:m", None)]


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
async def test_no_retry_goes_to_a_circuit_that_just_opened(upstreams: Upstreams, stream: bool) -> None:
    upstreams.a.queue(Reply(status=500))
    async with router_for(upstreams, breaker_failures=1) as router:
        attempts: list[Attempt] = []
        answer = await call(router, route(router, "a", "b"), attempts, stream=stream, retries=2)
        assert router.health.state("a:m") == "open"
    assert answer.target.label == "b:m"
    assert classes(attempts) == [("a:m", "server_error"), ("b:m", None)]
    assert len(upstreams.a.requests) == 1


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
async def test_the_deadline_blames_the_target_that_used_it_up(upstreams: Upstreams, stream: bool) -> None:
    # The drip resets every per-read timeout (0.5 s) for 10 s: only the 1 s request deadline stops it.
    async with router_for(upstreams, timeout_s=0.5) as router:
        attempts: list[Attempt] = []
        started = time.monotonic()
        with pytest.raises(AllTargetsFailed) as caught:
            await call(router, route(router, "drip", "b"), attempts, stream=stream, budget_s=1.0)
        elapsed = time.monotonic() - started
    assert caught.value.target == "drip:m"
    assert caught.value.last.error_class is ErrorClass.TIMEOUT
    assert classes(attempts) == [("drip:m", "timeout")], "the fallback was never called: no attempt, no blame"
    assert not upstreams.b.requests
    # Far from the drip's 10 s (a generous bound: a busy machine is late, never 8 s late on a 1 s deadline).
    assert 0.95 <= elapsed < 8.0, "the request deadline (1 s) bounds the call, not the drip (10 s)"


async def test_a_deadline_already_passed_calls_no_one(upstreams: Upstreams) -> None:
    async with router_for(upstreams) as router:
        attempts: list[Attempt] = []
        with pytest.raises(AllTargetsFailed) as caught:
            await call(router, route(router, "a", "b"), attempts, stream=False, budget_s=-0.1)
    assert caught.value.last.error_class is ErrorClass.TIMEOUT
    assert "left no time to call any upstream" in caught.value.last.message
    assert attempts == []
    assert not upstreams.a.requests


#: the breaker's cooldown in the probe tests; their clock (``health_clock``) moves past it on demand
COOLDOWN_S = 30


async def open_then_half_open(router: Router, upstreams: Upstreams, clock: HealthClock) -> None:
    """One failure opens the circuit of ``a``; after the cooldown the next request may probe it."""
    upstreams.a.queue(Reply(status=500))
    await call(router, route(router, "a", "b"), [], stream=False)
    assert router.health.state("a:m") == "open"
    clock.advance(COOLDOWN_S + 1)


async def assert_probed_again(router: Router, upstreams: Upstreams, clock: HealthClock) -> None:
    """The probe got its verdict or was released: a later request probes ``a`` and closes the circuit."""
    clock.advance(COOLDOWN_S + 1)
    attempts: list[Attempt] = []
    answer = await call(router, route(router, "a", "b"), attempts, stream=False)
    assert answer.target.label == "a:m", f"the circuit stayed stuck: {attempts}"
    assert router.health.state("a:m") == "closed"


@pytest.mark.slow
async def test_a_probe_cut_by_the_deadline_is_recorded(upstreams: Upstreams, health_clock: HealthClock) -> None:
    async with router_for(upstreams, breaker_failures=1, cooldown_s=COOLDOWN_S) as router:
        await open_then_half_open(router, upstreams, health_clock)
        upstreams.a.queue(Reply(text="too late", delay_s=3))
        attempts: list[Attempt] = []
        with pytest.raises(AllTargetsFailed) as caught:
            await call(router, route(router, "a", "b"), attempts, stream=False, budget_s=0.5)
        assert caught.value.target == "a:m"
        assert router.health.state("a:m") == "open", "a probe that timed out re-opens the circuit"
        await assert_probed_again(router, upstreams, health_clock)


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
async def test_a_cancelled_probe_is_released(upstreams: Upstreams, stream: bool, health_clock: HealthClock) -> None:
    async with router_for(upstreams, breaker_failures=1, cooldown_s=COOLDOWN_S) as router:
        await open_then_half_open(router, upstreams, health_clock)
        upstreams.a.queue(Reply(text="too late", delay_s=3))
        task = asyncio.create_task(call(router, route(router, "a", "b"), [], stream=stream))
        while not upstreams.a.requests[1:]:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await assert_probed_again(router, upstreams, health_clock)


@pytest.mark.slow
async def test_a_probe_whose_client_left_mid_stream_is_released(upstreams: Upstreams,
                                                                 health_clock: HealthClock) -> None:
    async with router_for(upstreams, breaker_failures=1, cooldown_s=COOLDOWN_S) as router:
        await open_then_half_open(router, upstreams, health_clock)
        upstreams.a.queue(Reply(text="Partial answer that stalls", fault="stall"))
        events = router.stream(route(router, "a", "b"), REQUEST, [], 0, time.monotonic() + 10)
        assert isinstance(events, AsyncGenerator)
        first = await anext(events)
        assert not isinstance(first, Answer)
        await events.aclose()  # what the response does when the client disconnects
        await assert_probed_again(router, upstreams, health_clock)


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
async def test_every_request_that_skips_an_open_circuit_counts_a_failover(upstreams: Upstreams, stream: bool) -> None:
    """The issue's figures: 25 requests answered by the fallback while the primary was open counted 3
    failovers. A move past an open circuit is a failover (``circuit_open``); one past a failure keeps its class."""
    from gateway.observability import metrics

    upstreams.a.queue(Reply(status=500))
    async with router_for(upstreams, breaker_failures=1) as router:
        targets = route(router, "a", "b")
        before_error = metrics.FAILOVERS.get("a:m", "server_error")
        before_skip = metrics.FAILOVERS.get("a:m", "circuit_open")
        for _ in range(5):
            attempts: list[Attempt] = []
            answer = await call(router, targets, attempts, stream=stream)
            assert answer.target.label == "b:m"
        # An open circuit after the last target (nothing moved past it) is no failover.
        last_open = metrics.FAILOVERS.get("a:m", "circuit_open")
        await call(router, route(router, "b", "a"), [], stream=stream)
        assert metrics.FAILOVERS.get("a:m", "circuit_open") == last_open
    assert len(upstreams.a.requests) == 1
    assert metrics.FAILOVERS.get("a:m", "server_error") - before_error == 1
    assert metrics.FAILOVERS.get("a:m", "circuit_open") - before_skip == 4
