"""The gateway as a plain OpenAI-compatible proxy, driven by the official openai SDK."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.e2e.conftest import Gateway
from tests.fakes.upstream import FakeUpstream, Reply

USER = [{"role": "user", "content": "hello"}]


def test_non_stream_text(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="Paris is sunny.", usage=(12, 4)))
    completion = gateway.client().chat.completions.create(model="plain", messages=USER, temperature=0.3)
    assert completion.choices[0].message.content == "Paris is sunny."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.id.startswith("chatcmpl-")
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens, completion.usage.total_tokens) == (
        12, 4, 16)
    sent = fakes["primary"].bodies[0]
    assert sent["model"] == "up-model"  # the upstream model name substituted
    assert sent["temperature"] == 0.3
    extension = completion.model_extra["gateway"]
    assert extension["status"] == "completed"
    assert extension["answered_by"] == ["primary:up-model"]


def test_unknown_fields_pass_through(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    gateway.client().chat.completions.create(model="plain", messages=USER, seed=7, stop=["END"],
                                             extra_body={"top_k": 40, "custom_vendor_flag": {"x": 1}})
    sent = fakes["primary"].bodies[0]
    assert sent["seed"] == 7 and sent["stop"] == ["END"]
    assert sent["top_k"] == 40 and sent["custom_vendor_flag"] == {"x": 1}
    assert "gateway" not in sent


def test_upstream_auth_header_is_the_providers_key(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    gateway.client().chat.completions.create(model="plain", messages=USER)
    assert fakes["primary"].requests[0].path == "/chat/completions"


def test_stream_text_and_usage(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="Hello there, friend.", usage=(3, 7)))
    stream = gateway.client().chat.completions.create(model="plain", messages=USER, stream=True,
                                                      stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello there, friend."
    assert len({c.id for c in chunks}) == 1
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    usage = [c.usage for c in chunks if c.usage]
    assert usage and usage[-1].total_tokens == 10
    assert fakes["primary"].bodies[0]["stream"] is True


def test_stream_without_usage_request_has_no_usage_chunk(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="abc"))
    chunks = list(gateway.client().chat.completions.create(model="plain", messages=USER, stream=True))
    assert not [c for c in chunks if c.usage]


async def test_async_client_stream_and_non_stream(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="one"), Reply(text="two three"))
    client = gateway.async_client()
    completion = await client.chat.completions.create(model="plain", messages=USER)
    assert completion.choices[0].message.content == "one"
    stream = await client.chat.completions.create(model="plain", messages=USER, stream=True)
    parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    assert "".join(parts) == "two three"
    await client.close()


def test_client_tool_calls_come_back_to_the_client(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("lookup", {"q": "a"}), ("lookup", {"q": "b"})]))
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    completion = gateway.client().chat.completions.create(model="plain", messages=USER, tools=tools)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert [c.function.arguments for c in choice.message.tool_calls] == ['{"q":"a"}', '{"q":"b"}']
    assert fakes["primary"].bodies[0]["tools"] == tools


def test_stream_client_tool_calls(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="Looking.", tool_calls=[("lookup", {"q": "a"}), ("lookup", {"q": "b"})]))
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    chunks = list(gateway.client().chat.completions.create(model="plain", messages=USER, tools=tools, stream=True))
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            entry = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] += delta.id or ""
            entry["name"] += (delta.function.name or "") if delta.function else ""
            entry["arguments"] += (delta.function.arguments or "") if delta.function else ""
    assert [c["arguments"] for c in calls.values()] == ['{"q":"a"}', '{"q":"b"}']
    assert all(c["id"] and c["name"] == "lookup" for c in calls.values())
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["tool_calls"]


def test_models_lists_routes(gateway: Gateway) -> None:
    names = [m.id for m in gateway.client().models.list()]
    assert names[:3] == ["plain", "agent", "failover"]


def test_wrong_key_is_401(gateway: Gateway) -> None:
    with pytest.raises(openai.AuthenticationError) as caught:
        gateway.client(key="nope").chat.completions.create(model="plain", messages=USER)
    assert caught.value.status_code == 401
    assert gateway.post("/v1/chat/completions", {"model": "plain", "messages": USER}, key=None).status_code == 401
    assert httpx.get(f"{gateway.url}/v1/models").status_code == 401


def test_unknown_model_is_404(gateway: Gateway) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        gateway.client().chat.completions.create(model="no-such-model", messages=USER)
    assert caught.value.body["code"] == "model_not_found"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": USER}, "model"),
        ({"model": "plain"}, "messages"),
        ({"model": 42, "messages": USER}, "model"),
        ({"model": "plain", "messages": "hi"}, "messages"),
        ({"model": "plain", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"model": "plain", "messages": USER, "temperature": "hot"}, "temperature"),
        ({"model": "plain", "messages": USER, "stream": "yes"}, "stream"),
        ({"model": "plain", "messages": [*USER, {"role": "tool", "tool_call_id": "c1", "content": "x"}]},
         "messages[1]"),
        ({"model": "plain", "messages": [*USER, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, *USER]}, "messages[1]"),
    ],
)
def test_bad_bodies_are_400_with_param(gateway: Gateway, body: dict, param: str) -> None:
    response = gateway.post("/v1/chat/completions", body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert error["type"] == "invalid_request_error" and error["message"]


def test_invalid_json_is_400(gateway: Gateway) -> None:
    response = httpx.post(f"{gateway.url}/v1/chat/completions", content=b"{nope",
                          headers={"authorization": "Bearer test-key", "content-type": "application/json"})
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["error"]["message"]


def test_body_over_limit_is_413(gateway: Gateway) -> None:
    big = {"model": "plain", "messages": [{"role": "user", "content": "x" * 300_000}]}
    response = gateway.post("/v1/chat/completions", big)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


def test_upstream_4xx_passes_through(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(status=422, error_body={"error": {"message": "temperature out of range",
                                                                   "type": "invalid_request_error"}}))
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        gateway.client().chat.completions.create(model="plain", messages=USER)
    assert "temperature out of range" in caught.value.message


def test_upstream_unreachable_is_502(fakes: dict[str, FakeUpstream]) -> None:
    from tests.e2e.conftest import gateway_config
    from tests.ports import free_port

    dead = FakeUpstream("openai")
    dead.port = free_port()  # never started: connection refused
    gw = Gateway(gateway_config(dict.fromkeys(fakes, dead))).start()
    try:
        with pytest.raises(openai.APIStatusError) as caught:
            gw.client().chat.completions.create(model="plain", messages=USER)
        assert caught.value.status_code == 502
        assert "primary:up-model" in caught.value.message
    finally:
        gw.stop()


def test_upstream_timeout_is_504(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="late", delay_s=3))
    with pytest.raises(openai.APIStatusError) as caught:
        gateway.client().chat.completions.create(model="plain", messages=USER)
    assert caught.value.status_code == 504


def test_client_disconnect_cancels_upstream_stream(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="a long answer", fault="stall"))

    async def go() -> None:
        async with (
            httpx.AsyncClient(timeout=10) as client,
            client.stream("POST", f"{gateway.url}/v1/chat/completions",
                          json={"model": "plain", "messages": USER, "stream": True},
                          headers={"authorization": "Bearer test-key"}) as response,
        ):
            async for line in response.aiter_lines():
                if "a lon" in line:
                    break
        # The client is gone; the gateway must drop the upstream request.
        for _ in range(100):
            if fakes["primary"].in_flight == 0:
                return
            await asyncio.sleep(0.02)

    asyncio.run(go())
    assert fakes["primary"].in_flight == 0


def test_health_ready_metrics(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    gateway.client().chat.completions.create(model="plain", messages=USER)
    assert httpx.get(f"{gateway.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{gateway.url}/readyz").json()
    assert ready["ready"] is True and ready["store"]["kind"] == "memory"
    text = httpx.get(f"{gateway.url}/metrics").text
    assert 'loopgate_requests_total{path="/v1/chat/completions",model="plain",status="200"}' in text
    assert "loopgate_request_duration_seconds_bucket" in text
    assert 'loopgate_upstream_attempts_total{target="primary:up-model",outcome="ok"}' in text
    # The answered call's connection went back to the provider's pool, kept alive (the gateway
    # is shared by the session's tests, so earlier concurrent calls may have left more idle ones).
    connections = {state: float(value) for state, value in
                   re.findall(r'loopgate_upstream_connections\{provider="primary",state="(\w+)"\} (\S+)', text)}
    assert set(connections) == {"in_use", "idle", "waiting"}
    assert connections["waiting"] == 0 and connections["idle"] >= 1


def test_two_workers_serve(fakes: dict[str, FakeUpstream]) -> None:
    from tests.e2e.conftest import gateway_config

    gw = Gateway(gateway_config(fakes)).start("--workers", "2")
    try:
        fakes["primary"].default = Reply(text="from a worker")
        answers = {gw.client().chat.completions.create(model="plain", messages=USER).choices[0].message.content
                   for _ in range(6)}
        assert answers == {"from a worker"}
        assert "each worker keeps its own continuations" in gw.logs()
    finally:
        fakes["primary"].default = Reply(text="ok")
        gw.stop()


def test_chunked_body_over_limit_is_413(gateway: Gateway) -> None:
    def body() -> Iterator[bytes]:
        yield b'{"model": "plain", "messages": [{"role": "user", "content": "'
        for _ in range(40):
            yield b"x" * 10_000
        yield b'"}]}'

    response = httpx.post(f"{gateway.url}/v1/chat/completions", content=body(), timeout=20,
                          headers={"authorization": "Bearer test-key", "content-type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
