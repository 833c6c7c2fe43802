"""Prices and ``gateway.usage_cost`` end to end: every answered model call billed at its own target's price,
failed attempts never, in stream and non-stream responses and in way-B resumes; the token and cost
counters of /metrics. The gateway runs on a real Redis (usage aggregates are written there)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import httpx
import pytest
import redis

from tests.e2e.conftest import KEY, Gateway, gateway_config, require_redis
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)
IN_CI = os.environ.get("CI", "").lower() == "true"
USER = [{"role": "user", "content": "What is 1 + 2?"}]

# primary:p-model 2/8 USD per Mtok (cached 0.5) on the target; secondary:s-model 10/30 from the provider's prices.
PRICED_MODELS = """
  priced:
    targets:
      - {provider: primary, model: p-model, price: {input_per_mtok: 2, output_per_mtok: 8, cached_input_per_mtok: 0.5}}
      - {provider: secondary, model: s-model}
    tools: [add, delete_record]
  half_priced:
    targets: [{provider: primary, model: p-model}, {provider: primary, model: unpriced}]
    tools: [add]
"""
SECONDARY_PRICES = "prices: {s-model: {input_per_mtok: 10, output_per_mtok: 30}}, "


def mtok(prompt: int, completion: int, cached: int, price: tuple[float, float, float]) -> float:
    return ((prompt - cached) * price[0] + cached * price[2] + completion * price[1]) / 1_000_000


P_PRICE = (2.0, 8.0, 0.5)
S_PRICE = (10.0, 30.0, 10.0)


def priced_config(fakes: dict[str, FakeUpstream], tool_server: ToolServer, extra: str = "") -> str:
    config = gateway_config(fakes, store_url=REDIS_URL, tool_server=tool_server.url, extra_models=PRICED_MODELS)
    config = config.replace("api_key: upstream-secondary, ", "api_key: upstream-secondary, " + SECONDARY_PRICES)
    assert SECONDARY_PRICES in config
    return config + extra


@pytest.fixture(scope="module")
def priced(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[Gateway]:
    require_redis(REDIS_URL)
    redis.Redis.from_url(REDIS_URL).flushdb()
    gateway = Gateway(priced_config(fakes, tool_server)).start()
    yield gateway
    gateway.stop()


def loop_with_failover(fakes: dict[str, FakeUpstream]) -> float:
    """Call 1 on primary (a tool call), call 2: primary fails, secondary answers. Returns the expected cost."""
    fakes["primary"].queue(Reply(tool_calls=[("add", {"a": 1, "b": 2})], usage=(1000, 100), cached=400),
                           Reply(status=500))
    fakes["secondary"].queue(Reply(text="3", usage=(2000, 50)))
    return mtok(1000, 100, 400, P_PRICE) + mtok(2000, 50, 0, S_PRICE)


def test_tool_loop_bills_every_call_at_its_targets_price(priced: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    expected = loop_with_failover(fakes)
    completion = priced.client().chat.completions.create(model="priced", messages=USER)
    gateway = completion.model_extra["gateway"]
    assert gateway["answered_by"] == ["primary:p-model", "secondary:s-model"]
    assert [a["error_class"] for a in gateway["attempts"]].count("server_error") == 1  # the unbilled attempt
    assert completion.usage.prompt_tokens == 3000
    assert gateway["usage_cost"] == pytest.approx(expected, abs=1e-9)
    assert gateway["usage_cost"] == pytest.approx(0.0237, abs=1e-9)


def test_stream_carries_the_same_cost(priced: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    expected = loop_with_failover(fakes)
    stream = priced.client().chat.completions.create(model="priced", messages=USER, stream=True,
                                                    stream_options={"include_usage": True})
    summaries = [c.model_extra["gateway"] for c in stream
                 if (c.model_extra or {}).get("gateway", {}).get("status") == "completed"]
    assert len(summaries) == 1
    assert summaries[0]["answered_by"] == ["primary:p-model", "secondary:s-model"]
    assert summaries[0]["usage_cost"] == pytest.approx(expected, abs=1e-9)


def test_failed_attempt_is_not_billed(priced: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(status=500, usage=(999_999, 999_999)))
    fakes["secondary"].queue(Reply(text="hi", usage=(100, 10)))
    completion = priced.client().chat.completions.create(model="priced", messages=USER)
    gateway = completion.model_extra["gateway"]
    assert gateway["answered_by"] == ["secondary:s-model"]
    assert len(gateway["attempts"]) == 2
    assert gateway["usage_cost"] == pytest.approx(mtok(100, 10, 0, S_PRICE), abs=1e-9)


def test_cost_is_omitted_when_a_call_has_no_price(priced: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    completion = priced.client().chat.completions.create(model="plain", messages=USER)
    assert "usage_cost" not in completion.model_extra["gateway"]
    # one priced call and one unpriced call in the same loop: no partial cost is shown
    fakes["primary"].queue(Reply(tool_calls=[("add", {"a": 1, "b": 2})]), Reply(status=500), Reply(text="3"))
    completion = priced.client().chat.completions.create(model="half_priced", messages=USER)
    gateway = completion.model_extra["gateway"]
    assert gateway["answered_by"] == ["primary:p-model", "primary:unpriced"]
    assert "usage_cost" not in gateway


def test_way_b_resume_reports_its_own_calls_cost(priced: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "42"})], usage=(500, 20)),
                           Reply(text="deleted", usage=(700, 30), cached=200))
    paused = priced.client().chat.completions.create(model="priced", messages=USER).model_extra["gateway"]
    assert paused["status"] == "paused"
    assert paused["usage_cost"] == pytest.approx(mtok(500, 20, 0, P_PRICE), abs=1e-9)
    pending = paused["pending"][0]["tool_call_id"]
    response = priced.post(f"/v1/continuations/{paused['continuation_id']}",
                           {"decisions": [{"tool_call_id": pending, "approve": True}]})
    assert response.status_code == 200, response.text
    gateway = response.json()["gateway"]
    assert gateway["status"] == "completed"
    assert gateway["usage_cost"] == pytest.approx(mtok(700, 30, 200, P_PRICE), abs=1e-9)


def test_way_b_stream_resume_reports_cost(priced: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "7"})], usage=(500, 20)),
                           Reply(text="deleted", usage=(300, 40)))
    paused = priced.client().chat.completions.create(model="priced", messages=USER).model_extra["gateway"]
    pending = paused["pending"][0]["tool_call_id"]
    with httpx.stream("POST", f"{priced.url}/v1/continuations/{paused['continuation_id']}",
                      json={"decisions": [{"tool_call_id": pending, "approve": True}], "stream": True},
                      headers={"authorization": f"Bearer {KEY}"}, timeout=20) as response:
        text = response.read().decode()
    costs = re.findall(r'"usage_cost":([0-9.e-]+)', text)
    assert costs and float(costs[-1]) == pytest.approx(mtok(300, 40, 0, P_PRICE), abs=1e-9)


def metric(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{wanted}}} "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_token_and_cost_counters(priced: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    before = httpx.get(f"{priced.url}/metrics").text
    expected = loop_with_failover(fakes)
    priced.client().chat.completions.create(model="priced", messages=USER)
    after = httpx.get(f"{priced.url}/metrics").text

    def delta(name: str, **labels: str) -> float:
        return metric(after, name, **labels) - metric(before, name, **labels)

    labels = {"tenant": "team-a", "route": "priced"}
    assert delta("loopgate_tokens_total", **labels, kind="prompt") == 3000
    assert delta("loopgate_tokens_total", **labels, kind="completion") == 150
    assert delta("loopgate_tokens_total", **labels, kind="cached") == 400
    assert delta("loopgate_cost_usd_total", **labels) == pytest.approx(expected, abs=1e-9)
    # an unconfigured route name never becomes a label; a direct route is PROVIDER/*
    priced.client().chat.completions.create(model="secondary/s-model", messages=USER)
    final = httpx.get(f"{priced.url}/metrics").text
    assert metric(final, "loopgate_tokens_total", tenant="team-a", route="secondary/*", kind="prompt") > 0
    assert metric(final, "loopgate_cost_usd_total", tenant="team-a", route="secondary/*") > 0
