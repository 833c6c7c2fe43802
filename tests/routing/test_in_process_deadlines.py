"""First-token and stall deadlines hold for in-process targets too (routing/in_process.py), with the mock provider.

The mock waits ``latency_ms`` before its first piece and paces pieces at ``tokens_per_s``: a real
slow target in all but the wire, so the deadlines are exercised on the router's real walk.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.canonical import ModelRequest, StreamDelta, TextDelta
from gateway.config.model import ProviderConfig, RoutingConfig, TargetConfig
from gateway.providers.base import ErrorClass, ProviderError
from gateway.providers.upstreams import upstream_pool
from gateway.routing.health import TargetHealth
from gateway.routing.in_process import next_within, wait_bound
from gateway.routing.rescue import StreamPolicy
from gateway.routing.router import Answer, Attempt, Router

REQUEST = ModelRequest(messages=[{"role": "user", "content": "one two three four five six"}])
ECHO = "You said: one two three four five six"


def mock(name: str, latency_ms: float = 0.0, tokens_per_s: float = 0.0) -> ProviderConfig:
    return ProviderConfig(name=name, type="mock", base_url="", api_key="", latency_ms=latency_ms,
                          tokens_per_s=tokens_per_s)


async def walk(providers: dict[str, ProviderConfig], targets: list[TargetConfig],
               policy: StreamPolicy) -> tuple[str, Answer, list[Attempt], float]:
    pool = upstream_pool(providers)
    router = Router(providers, RoutingConfig(), pool, TargetHealth(5, 30.0))
    attempts: list[Attempt] = []
    text: list[str] = []
    answer = None
    started = time.monotonic()
    try:
        async for item in router.stream(router.resolve(targets), REQUEST, attempts, 0, time.monotonic() + 60,
                                        policy):
            if isinstance(item, Answer):
                answer = item
            else:
                batch: list[StreamDelta] = item
                text += [d.text for d in batch if isinstance(d, TextDelta)]
    finally:
        await pool.aclose()
    assert answer is not None
    return "".join(text), answer, attempts, time.monotonic() - started


async def test_a_late_first_token_fails_over_to_the_next_in_process_target() -> None:
    providers = {"slow": mock("slow", latency_ms=30_000), "quick": mock("quick")}
    text, answer, attempts, took = await walk(
        providers, [TargetConfig("slow", "m", first_token_timeout_s=0.3), TargetConfig("quick", "m")], StreamPolicy())
    assert text == ECHO and answer.target.label == "quick:m"
    assert [(a["target"], a["error_class"]) for a in attempts] == [("slow:m", "timeout"), ("quick:m", None)]
    assert took < 20, "the 30 s latency was not waited out"


async def test_a_stall_after_the_first_piece_is_rescued_on_the_next_target() -> None:
    providers = {"stalls": mock("stalls", tokens_per_s=0.05), "steady": mock("steady")}  # 20 s between pieces
    text, answer, attempts, took = await walk(
        providers, [TargetConfig("stalls", "m"), TargetConfig("steady", "m")], StreamPolicy(idle_s=0.3))
    assert text == ECHO  # the restart's repeat of the sent first piece was swallowed
    assert answer.rescued is not None and answer.rescued["how"] == "restart"
    assert attempts[0]["error_class"] == "timeout"
    assert took < 15, "the 20 s gap was not waited out"


async def test_without_bounds_a_slow_in_process_target_is_waited_for() -> None:
    providers = {"paced": mock("paced", latency_ms=200, tokens_per_s=50)}
    text, _answer, attempts, _ = await walk(providers, [TargetConfig("paced", "m")], StreamPolicy())
    assert text == ECHO and [a["error_class"] for a in attempts] == [None]


async def test_next_within_tells_its_own_deadline_from_the_sources_timeout() -> None:
    async def silent():  # type: ignore[no-untyped-def]
        await asyncio.sleep(30)
        yield 1

    with pytest.raises(ProviderError) as caught:
        await next_within(silent(), 0.05, "no first token within 0.05 s")
    assert caught.value.error_class is ErrorClass.TIMEOUT and "first token" in caught.value.message

    async def own_timeout():  # type: ignore[no-untyped-def]
        raise TimeoutError("the library's own")
        yield 1

    with pytest.raises(TimeoutError, match="the library's own"):
        await next_within(own_timeout(), 5.0, "unused")

    async def two():  # type: ignore[no-untyped-def]
        yield 1
        yield 2

    source = two()
    assert [await next_within(source, None, ""), await next_within(source, 1.0, ""),
            await next_within(source, 1.0, "")] == [1, 2, None]


def test_wait_bound_before_and_after_content() -> None:
    assert wait_bound(10.0, 10.5, False, 2.0, 1.0) == (1.5, "no first token within 2 s")
    assert wait_bound(10.0, 10.5, True, 2.0, 1.0)[0] == 1.0
    assert wait_bound(10.0, 10.5, False, None, 1.0) == (None, "")
    assert wait_bound(10.0, 10.5, True, 2.0, None) == (None, "")
