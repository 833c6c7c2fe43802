"""The mock provider end to end: a real gateway process, the official OpenAI SDK, no upstream at all.

The gateway runs with every proxy variable pointing at a closed port: nothing here may need
the network, which is what a keyless first run on a machine without egress relies on.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.e2e.conftest import KEY, Gateway

NO_EGRESS = {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
             "ALL_PROXY": "http://127.0.0.1:9", "NO_PROXY": "", "OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "",
             "GEMINI_API_KEY": ""}

CONFIG = f"""
server: {{host: 127.0.0.1, port: __PORT__}}
auth:
  keys: [{{key: {KEY}, tenant: team-a}}]
store: {{url: "memory://"}}
routing: {{backoff_base_s: 0.01, backoff_max_s: 0.05, request_timeout_s: 30}}
providers:
  mock: {{type: mock}}
  paced: {{type: mock, latency_ms: 200, tokens_per_s: 20}}
  stuck: {{type: mock, latency_ms: 60000, timeout_s: 0.3}}
tools:
  get_weather:
    description: Current weather for a city (made-up demo data)
    parameters:
      type: object
      properties: {{city: {{type: string, examples: [Paris]}}, unit: {{type: string, enum: [celsius, fahrenheit]}}}}
      required: [city]
    python: "gateway.demo:get_weather"
models:
  demo: {{targets: [{{provider: mock, model: mock-1}}], tools: [get_weather]}}
  paced: {{targets: [{{provider: paced, model: mock-slow}}]}}
  stuck_then_mock: {{targets: [{{provider: stuck, model: never}}, {{provider: mock, model: mock-1}}]}}
"""

ASK_WEATHER = "What is the weather in Paris? Use get_weather."
CLIENT_TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "read_local_file", "description": "Read a file on the caller's machine",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]


@pytest.fixture(scope="module")
def mock_gateway() -> Iterator[Gateway]:
    gateway = Gateway(CONFIG, env=NO_EGRESS).start()
    try:
        yield gateway
    finally:
        gateway.stop()


def test_text_answer_echoes_with_usage(mock_gateway: Gateway) -> None:
    reply = mock_gateway.client().chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "hello gateway"}])
    assert reply.choices[0].message.content == "You said: hello gateway"
    assert reply.choices[0].finish_reason == "stop" and reply.model == "mock-1"
    # A completion token per piece: "You", " said:", " hello", " gateway".
    assert reply.usage is not None and reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens == 4
    gateway = reply.model_extra["gateway"]
    assert gateway["status"] == "completed" and gateway["answered_by"] == ["mock:mock-1"]
    assert gateway["tool_calls"] == []


def test_stream_is_paced_by_tokens_per_s(mock_gateway: Gateway) -> None:
    words = "one two three four five six seven eight"
    started = time.monotonic()
    stream = mock_gateway.client().chat.completions.create(
        model="paced", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": words}])
    arrivals: list[tuple[float, str]] = []
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append((time.monotonic(), chunk.choices[0].delta.content))
    elapsed = time.monotonic() - started
    assert "".join(text for _, text in arrivals) == f"You said: {words}"
    assert len(arrivals) == 10  # one piece per chunk
    # latency_ms 200, then 9 gaps of 50 ms: at least ~0.65 s; generous bounds either way.
    assert elapsed >= 0.5
    # Spread over time, not one burst; unless this client was starved until the stream was all but sent (then it
    # reads everything at once, and only the elapsed time above tells the pacing).
    assert arrivals[-1][0] - arrivals[0][0] >= 0.3 or arrivals[0][0] - started >= 0.6
    assert elapsed < 15
    assert usage is not None and usage.completion_tokens == 10


def test_server_tool_loop(mock_gateway: Gateway) -> None:
    reply = mock_gateway.client().chat.completions.create(
        model="demo", messages=[{"role": "user", "content": ASK_WEATHER}])
    content = reply.choices[0].message.content or ""
    assert content.startswith("The get_weather tool returned: ")
    report = orjson.loads(content.removeprefix("The get_weather tool returned: "))
    assert report["city"] == "Paris" and report["unit"] == "celsius"
    gateway = reply.model_extra["gateway"]
    assert gateway["iterations"] == 2 and gateway["status"] == "completed"
    assert [(call["name"], call["status"]) for call in gateway["tool_calls"]] == [("get_weather", "ok")]
    assert not reply.choices[0].message.tool_calls  # the loop ran server-side


def test_server_tool_loop_streamed(mock_gateway: Gateway) -> None:
    stream = mock_gateway.client().chat.completions.create(
        model="demo", stream=True, messages=[{"role": "user", "content": ASK_WEATHER}])
    text, extension = "", None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if (chunk.model_extra or {}).get("gateway"):
            extension = chunk.model_extra["gateway"]
    assert text.startswith("The get_weather tool returned: {") and '"city":"Paris"' in text
    assert extension is not None and [call["name"] for call in extension["tool_calls"]] == ["get_weather"]


def test_client_tool_pauses_and_resumes_way_a(mock_gateway: Gateway) -> None:
    client = mock_gateway.client()
    messages: list[Any] = [{"role": "user", "content": "Summarise notes.txt: use read_local_file and get_weather"}]
    paused = client.chat.completions.create(model="demo", messages=messages, tools=CLIENT_TOOLS)
    assert paused.choices[0].finish_reason == "tool_calls"
    gateway = paused.model_extra["gateway"]
    assert gateway["status"] == "paused" and gateway["continuation_id"]
    # The server tool of the same turn ran before the pause; only the client tool is handed out.
    assert [(call["name"], call["status"]) for call in gateway["tool_calls"]] == [("get_weather", "ok")]
    message = paused.choices[0].message
    assert [call.function.name for call in message.tool_calls or []] == ["read_local_file"]
    call = (message.tool_calls or [])[0]
    assert orjson.loads(call.function.arguments) == {"path": "sample-path"}
    messages.append(message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "NOTES: ship the mock provider"})
    final = client.chat.completions.create(model="demo", messages=messages, tools=CLIENT_TOOLS)
    content = final.choices[0].message.content or ""
    # Resumed from the stored transcript: the answer sees the hidden server result too.
    lines = content.split("\n")
    assert lines[0].startswith("The get_weather tool returned: {") and '"city":"Paris"' in lines[0]
    assert lines[1] == "The read_local_file tool returned: NOTES: ship the mock provider"
    assert final.model_extra["gateway"]["status"] == "completed"
    # The continuation was used up: the same follow-up again is refused (409), never answered without the hidden
    # server result, and the answer stays readable.
    with pytest.raises(openai.ConflictError, match="resumed already"):
        client.chat.completions.create(model="demo", messages=messages, tools=CLIENT_TOOLS)
    kept = httpx.get(f"{mock_gateway.url}/v1/continuations/{gateway['continuation_id']}",
                     headers={"authorization": f"Bearer {KEY}"}).json()
    assert kept["status"] == "resumed" and kept["result"]["choices"][0]["message"]["content"] == content


def test_latency_past_the_timeout_fails_over(mock_gateway: Gateway) -> None:
    reply = mock_gateway.client().chat.completions.create(
        model="stuck_then_mock", messages=[{"role": "user", "content": "anyone there?"}])
    assert reply.choices[0].message.content == "You said: anyone there?"
    attempts = reply.model_extra["gateway"]["attempts"]
    assert [(a["target"], a["error_class"]) for a in attempts] == [("stuck:never", "timeout"), ("mock:mock-1", None)]


def test_direct_model_name_and_max_tokens(mock_gateway: Gateway) -> None:
    reply = mock_gateway.client().chat.completions.create(
        model="mock/any-name", max_tokens=2, messages=[{"role": "user", "content": "cut this answer short"}])
    assert reply.choices[0].message.content == "You said:" and reply.choices[0].finish_reason == "length"
    assert reply.model == "any-name" and reply.model_extra["gateway"]["answered_by"] == ["mock:any-name"]
