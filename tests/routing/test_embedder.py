"""Embeddings calls walked by the router's own failover rules (retries, breaker, deadline), against real fakes."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest

from gateway.canonical_embeddings import EmbeddingRequest
from gateway.config.model import ProviderConfig, RoutingConfig, TargetConfig
from gateway.providers.upstreams import upstream_pool
from gateway.routing.embeddings import Embedder
from gateway.routing.health import TargetHealth
from gateway.routing.router import AllTargetsFailed, Attempt, Router
from tests.fakes.embeddings import vector_of
from tests.fakes.upstream import FakeUpstream, Reply

TEXTS = [f"text {i}" for i in range(230)]


def request(texts: list[str] = TEXTS) -> EmbeddingRequest:
    return EmbeddingRequest(texts, texts, None, "float", None, len(texts))


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, FakeUpstream]]:
    started = {"a": FakeUpstream("openai").start(), "b": FakeUpstream("openai").start(),
               "g": FakeUpstream("gemini").start()}
    yield started
    for fake in started.values():
        fake.stop()


@pytest.fixture(autouse=True)
def _fresh(fakes: dict[str, FakeUpstream]) -> None:
    for fake in fakes.values():
        fake.reset()


@asynccontextmanager
async def embedder_for(fakes: dict[str, FakeUpstream], breaker_failures: int = 1000) -> AsyncIterator[
        tuple[Embedder, Router]]:
    providers = {name: ProviderConfig(name=name, type=fake.wire, base_url=fake.url, api_key="k")  # type: ignore[arg-type]
                 for name, fake in fakes.items()}
    pool = upstream_pool(providers)
    policy = RoutingConfig(backoff_base_s=0.01, backoff_max_s=0.05, breaker_failures=breaker_failures,
                           breaker_cooldown_s=30)
    router = Router(providers, policy, pool, TargetHealth(breaker_failures, 30))
    try:
        yield Embedder(router, pool), router
    finally:
        await pool.aclose()


async def test_retries_then_fails_over(fakes: dict[str, FakeUpstream]) -> None:
    fakes["a"].queue(Reply(status=429), Reply(status=500))
    async with embedder_for(fakes) as (embedder, router):
        targets = router.resolve([TargetConfig("a", "m", dimensions=8), TargetConfig("b", "m", dimensions=8)])
        attempts: list[Attempt] = []
        target, result = await embedder.embed(targets, request(TEXTS[:3]), attempts, 1,
                                              time.monotonic() + 60)  # room for a retry and the next target
    assert target.label == "b:m"
    assert [a["error_class"] for a in attempts] == ["rate_limited", "server_error", None]  # one retry on a
    assert result.vectors == [vector_of("m", t, 8) for t in TEXTS[:3]]


async def test_a_failed_gemini_batch_fails_the_whole_attempt(fakes: dict[str, FakeUpstream]) -> None:
    """230 inputs are three batches; one of them failing sends the whole request to the next target."""
    fakes["g"].queue(Reply(), Reply(status=503))
    async with embedder_for(fakes) as (embedder, router):
        targets = router.resolve([TargetConfig("g", "gm"), TargetConfig("b", "m")])
        attempts: list[Attempt] = []
        target, result = await embedder.embed(targets, request(), attempts, 0,
                                              time.monotonic() + 10)
    assert target.label == "b:m" and [a["error_class"] for a in attempts] == ["overloaded", None]
    assert result.vectors == [vector_of("m", t, 8) for t in TEXTS]
    assert len(fakes["b"].requests) == 1


async def test_gemini_batches_in_order(fakes: dict[str, FakeUpstream]) -> None:
    async with embedder_for(fakes) as (embedder, router):
        targets = router.resolve([TargetConfig("g", "gm")])
        _, result = await embedder.embed(targets, request(), [], 0, time.monotonic() + 10)
    assert result.vectors == [vector_of("gm", t, 8) for t in TEXTS]
    assert result.prompt_tokens is None  # Gemini reports none: the gateway's count stands in
    assert sorted(len(r.body["requests"]) for r in fakes["g"].requests) == [30, 100, 100]


async def test_the_breaker_counts_embeddings_failures(fakes: dict[str, FakeUpstream]) -> None:
    fakes["a"].queue(Reply(status=500), Reply(status=500))
    async with embedder_for(fakes, breaker_failures=2) as (embedder, router):
        targets = router.resolve([TargetConfig("a", "m"), TargetConfig("b", "m")])
        for _ in range(2):
            await embedder.embed(targets, request(["x"]), [], 0, time.monotonic() + 10)
        attempts: list[Attempt] = []
        await embedder.embed(targets, request(["x"]), attempts, 0, time.monotonic() + 10)
    assert attempts[0]["error_class"] == "circuit_open" and len(fakes["a"].requests) == 2


async def test_a_bad_request_ends_the_walk(fakes: dict[str, FakeUpstream]) -> None:
    fakes["a"].queue(Reply(status=400))
    async with embedder_for(fakes) as (embedder, router):
        targets = router.resolve([TargetConfig("a", "m"), TargetConfig("b", "m")])
        with pytest.raises(AllTargetsFailed) as caught:
            await embedder.embed(targets, request(["x"]), [], 0, time.monotonic() + 10)
    assert caught.value.target == "a:m" and fakes["b"].requests == []


async def test_the_deadline_bounds_the_walk(fakes: dict[str, FakeUpstream]) -> None:
    fakes["a"].queue(Reply(delay_s=5))
    async with embedder_for(fakes) as (embedder, router):
        targets = router.resolve([TargetConfig("a", "m"), TargetConfig("b", "m")])
        with pytest.raises(AllTargetsFailed) as caught:
            await embedder.embed(targets, request(["x"]), [], 0, time.monotonic() + 0.5)
    assert caught.value.last.error_class.value == "timeout"


async def test_vectors_not_of_the_declared_size_fail_over(fakes: dict[str, FakeUpstream]) -> None:
    async with embedder_for(fakes) as (embedder, router):
        targets = router.resolve([TargetConfig("a", "m", dimensions=4), TargetConfig("b", "m-d4", dimensions=4)])
        attempts: list[Attempt] = []
        target, result = await embedder.embed(targets, request(["x"]), attempts, 0, time.monotonic() + 10)
    assert target.label == "b:m-d4" and [a["error_class"] for a in attempts] == ["invalid_response", None]
    assert result.vectors == [vector_of("m-d4", "x", 4)]
