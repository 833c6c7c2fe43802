"""Hostile chat bodies against a running gateway: never a 5xx, always the OpenAI error shape.

A property-based test (hypothesis, derandomized so CI sees the same examples every run) takes
valid bodies for routes of every wire format and replaces one or more values anywhere in them
(top-level fields, messages, content parts, tool calls, tool definitions, gateway options) with
arbitrary JSON; raw non-JSON bytes and absurd nesting are tried too. Upstreams are the strict fakes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.conftest import KEY, Gateway, gateway_config
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply

ROUTES = ["plain", "agent", "solo_claude", "solo_gemini", "solo_primary", "primary/up-model"]
CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
BASE_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Look it up."},
                                 {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "found"},
    {"role": "user", "content": "Thanks; and now?"},
]
LOOKUP = {"type": "function", "function": {"name": "lookup", "description": "client lookup",
                                           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
# Field names a mutation may add where they are missing: the ones the gateway or an adapter reads.
EXTRA_KEYS = ["n", "functions", "function_call", "gateway", "stream_options", "temperature", "top_p", "max_tokens",
              "max_completion_tokens", "seed", "stop", "response_format", "reasoning_effort", "tool_choice",
              "parallel_tool_calls", "user", "metadata", "include_reasoning", "logit_bias", "role", "content", "name",
              "tool_calls", "tool_call_id", "refusal", "reasoning_content", "thinking_blocks", "extra_content",
              "max_tool_iterations", "headless", "include_usage", "function", "arguments", "parameters", "type", "id",
              "image_url", "url", "text", "file", "input_audio", "cache_control"]

scalars = (st.none() | st.booleans() | st.integers(min_value=-(2 ** 70), max_value=2 ** 70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
           | st.sampled_from(["user", "assistant", "tool", "function", "text", "image_url", "auto", "none", "{}",
                              "call_1", "lookup", "[1]", "data:image/png;base64,AAAA", "thinking"]))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.sampled_from(EXTRA_KEYS) | st.text(max_size=6), inner, max_size=3),
                           max_leaves=8)


Path = tuple[Any, ...]


def paths(value: Any, prefix: Path = ()) -> list[Path]:
    """Every place inside ``value`` (dict keys and list items, at any depth)."""
    found: list[Path] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        found.append((*prefix, key))
        found.extend(paths(child, (*prefix, key)))
    return found


def replaced(value: Any, path: Path, new: Any) -> Any:
    """A copy of ``value`` with ``new`` at ``path`` (the last step may name a key that is not there yet)."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    copy[head] = replaced(value[head], rest, new) if rest else new
    return copy


def mutate(data: st.DataObject, body: Any) -> Any:
    """``body`` with one place, chosen uniformly, replaced by arbitrary JSON (or a new field added to an object)."""
    places = paths(body)
    if not places:
        return data.draw(json_values)
    path = data.draw(st.sampled_from(places))
    parent = path[:-1]
    holder = body
    for step in parent:
        holder = holder[step]
    if isinstance(holder, dict) and data.draw(st.integers(0, 3)) == 0:
        path = (*parent, data.draw(st.sampled_from(EXTRA_KEYS)))
    return replaced(body, path, data.draw(json_values))


def assert_openai_error_shape(response: httpx.Response) -> None:
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and isinstance(error["type"], str)
    assert error["param"] is None or isinstance(error["param"], str)
    assert error["code"] is None or isinstance(error["code"], str)
    assert len(error["message"]) < 2000, "caller values are quoted truncated"


@pytest.fixture(scope="module")
def fuzz_gateway(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[Gateway]:
    gw = Gateway(gateway_config(fakes, tool_server=tool_server.url)).start()
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def http(fuzz_gateway: Gateway) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fuzz_gateway.url, headers={"authorization": f"Bearer {KEY}"}, timeout=20) as client:
        yield client


def post(http: httpx.Client, content: bytes) -> httpx.Response:
    response = http.post("/v1/chat/completions", content=content, headers={"content-type": "application/json"})
    assert response.status_code < 500, (response.status_code, response.text[:500], content[:500])
    if response.status_code >= 400:
        assert_openai_error_shape(response)
    return response


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_bodies_never_5xx(http: httpx.Client, fakes: dict[str, FakeUpstream], data: st.DataObject) -> None:
    body: Any = {"model": data.draw(st.sampled_from(ROUTES)), "messages": BASE_MESSAGES, "tools": [LOOKUP],
                 "stream": data.draw(st.booleans())}
    for _ in range(data.draw(st.integers(1, 3))):
        body = mutate(data, body)
    post(http, json.dumps(body).encode())
    for fake in fakes.values():
        fake.requests.clear()  # what reached a fake is checked by the strict rules in its answer, not afterwards


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
def test_raw_bytes_never_5xx(http: httpx.Client, raw: bytes) -> None:
    post(http, raw)


def test_a_huge_continuation_id_is_a_404_that_does_not_echo_it(http: httpx.Client) -> None:
    response = http.get("/v1/continuations/" + "c" * 20_000)
    assert response.status_code == 404 and len(response.text) < 400
    assert_openai_error_shape(response)


@pytest.mark.parametrize("depth", [150, 201, 300, 1100, 5000])
def test_deep_nesting_is_fine_or_a_clean_400(http: httpx.Client, fakes: dict[str, FakeUpstream], depth: int) -> None:
    nested = "[" * depth + '"x"' + "]" * depth
    raw = (f'{{"model": "plain", "messages": [{{"role": "user", "content": [{{"type": "text", "text": "hi", '
           f'"x": {nested}}}]}}], "user_data": {nested}}}').encode()
    response = post(http, raw)
    if depth <= 150:
        assert response.status_code == 200
    else:
        assert response.status_code == 400
    for fake in fakes.values():
        fake.requests.clear()


DECISION = st.fixed_dictionaries({}, optional={"tool_call_id": scalars, "approve": scalars, "output": json_values,
                                              "reason": json_values})


@pytest.fixture(scope="module")
def paused_id(fuzz_gateway: Gateway, fakes: dict[str, FakeUpstream]) -> str:
    fakes["primary"].queue(Reply(tool_calls=[("delete_record", {"id": "42"}), ("lookup", {"q": "x"})]))
    paused = fuzz_gateway.client().chat.completions.create(model="agent", messages=BASE_MESSAGES[:2],
                                                          tools=[LOOKUP])
    return str(paused.model_extra["gateway"]["continuation_id"])


@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=json_values | st.fixed_dictionaries(
    {"decisions": json_values | st.lists(DECISION, max_size=3)},
    optional={"stream": scalars, "stream_options": json_values}))
def test_decision_bodies_never_5xx(http: httpx.Client, paused_id: str, body: Any) -> None:
    response = http.post(f"/v1/continuations/{paused_id}", content=json.dumps(body).encode())
    assert response.status_code < 500, (response.status_code, response.text[:500], body)
    assert response.status_code == 400, "no arbitrary body answers every pending call"
    assert_openai_error_shape(response)


def test_no_traceback_was_logged(fuzz_gateway: Gateway) -> None:
    """Runs after the fuzzing above (file order): a 4xx never leaves a traceback behind."""
    assert "Traceback" not in fuzz_gateway.logs()
