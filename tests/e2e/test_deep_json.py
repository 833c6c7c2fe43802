"""JSON nested deeper than the gateway parses is a clear 400 (caller) or an invalid answer (upstream), never a 500.

orjson parses 1,024 levels but serialises 254: a tool call's arguments nested 300 deep were parsed
by the Anthropic and Gemini adapters and failed when the upstream request was serialised (issue 29).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.e2e.conftest import KEY, Gateway
from tests.fakes.upstream import FakeUpstream, Reply

DEEP = '{"a":' * 300 + "1" + "}" * 300
HISTORY = [{"role": "user", "content": "hi"},
           {"role": "assistant", "content": None, "tool_calls": [
               {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": DEEP}}]},
           {"role": "tool", "tool_call_id": "c1", "content": "ok"}]


@pytest.mark.parametrize("route", ["solo_claude", "solo_gemini", "solo_primary"])
def test_chat_history_arguments_nested_300_deep_are_a_400(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                          route: str) -> None:
    response = gateway.post("/v1/chat/completions", {"model": route, "messages": HISTORY})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "messages[1].tool_calls[0].function.arguments"
    assert "nested deeper than 200 levels" in error["message"]
    assert all(not fake.requests for fake in fakes.values())


def test_responses_function_call_arguments_nested_300_deep_are_a_400(gateway: Gateway,
                                                                     fakes: dict[str, FakeUpstream]) -> None:
    response = gateway.post("/v1/responses", {"model": "solo_claude", "input": [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": DEEP},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"}]})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "input[1].arguments"
    assert not fakes["claude"].requests


def test_messages_tool_use_input_nested_300_deep_is_an_anthropic_400(gateway: Gateway) -> None:
    deep: Any = 1
    for _ in range(300):
        deep = {"a": deep}
    body = {"model": "solo_claude", "max_tokens": 100, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "lookup", "input": deep}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]}
    response = httpx.post(f"{gateway.url}/v1/messages", content=_dumps_deep(body),
                          headers={"x-api-key": KEY, "content-type": "application/json"}, timeout=20)
    assert response.status_code == 400, response.text
    assert response.json()["type"] == "error" and response.json()["error"]["type"] == "invalid_request_error"


def test_a_models_arguments_nested_300_deep_reach_a_messages_caller_without_a_500(
        gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("lookup", DEEP)]))
    response = httpx.post(f"{gateway.url}/v1/messages", json={
        "model": "plain", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "lookup", "input_schema": {"type": "object"}}]},
        headers={"x-api-key": KEY}, timeout=20)
    assert response.status_code == 200, response.text
    block = response.json()["content"][0]
    assert block["type"] == "tool_use" and block["input"] == {}  # not a JSON object it can serialise: as invalid


def _dumps_deep(value: Any) -> bytes:
    """JSON text of a value orjson cannot serialise (too deep): built by hand."""
    if isinstance(value, dict):
        return b"{" + b",".join(b'"%s":%s' % (k.encode(), _dumps_deep(v)) for k, v in value.items()) + b"}"
    if isinstance(value, list):
        return b"[" + b",".join(_dumps_deep(v) for v in value) + b"]"
    if isinstance(value, str):
        return b'"' + value.encode() + b'"'
    return str(value).encode()
