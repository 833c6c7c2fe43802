"""In-process adapters count what they skip under the target's bounded metric label.

A direct route's model name is the caller's text (``PROVIDER/anything``): it must never become a
metric label. The router hands every in-process adapter the target's ``metric_label``
(``PROVIDER:*`` for a direct route); here LiteLLM's streaming call is a stand-in that yields one
chunk the OpenAI stream parser must skip, then a real answer.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.canonical import ModelRequest
from gateway.config.model import ProviderConfig, RoutingConfig, TargetConfig
from gateway.observability import metrics
from gateway.providers import litellm as litellm_adapter
from gateway.providers.upstreams import upstream_pool
from gateway.routing.health import TargetHealth
from gateway.routing.router import Answer, Attempt, Router

HOSTILE_MODEL = 'openai/evil"} 1\nloopgate_fake_total{x="'


async def _chunks(**_: Any) -> AsyncIterator[dict[str, Any]]:
    yield {"id": "c1", "object": "chat.completion.chunk", "choices": "not a list"}  # skipped, counted
    yield {"id": "c1", "object": "chat.completion.chunk", "model": "m",
           "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}


async def _acompletion(**kwargs: Any) -> AsyncIterator[dict[str, Any]]:
    return _chunks(**kwargs)


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "configured"])
async def test_a_skipped_chunk_is_counted_under_the_bounded_label(monkeypatch: pytest.MonkeyPatch,
                                                                  direct: bool) -> None:
    monkeypatch.setattr(litellm_adapter, "_library", lambda: SimpleNamespace(acompletion=_acompletion))
    providers = {"lite": ProviderConfig(name="lite", type="litellm", base_url="", api_key="k")}
    pool = upstream_pool(providers)
    router = Router(providers, RoutingConfig(), pool, TargetHealth(5, 30.0))
    metrics.UPSTREAM_MALFORMED_EVENTS.values.clear()
    try:
        targets = router.resolve([TargetConfig("lite", HOSTILE_MODEL if direct else "openai/m")], direct=direct)
        attempts: list[Attempt] = []
        answer = None
        async for item in router.stream(targets, ModelRequest(messages=[{"role": "user", "content": "hi"}]),
                                        attempts, 0, time.monotonic() + 10):
            if isinstance(item, Answer):
                answer = item
    finally:
        await pool.aclose()
    assert answer is not None and answer.response.message["content"] == "hi"
    assert metrics.UPSTREAM_MALFORMED_EVENTS.values == {("lite:*" if direct else "lite:openai/m",): 1.0}
