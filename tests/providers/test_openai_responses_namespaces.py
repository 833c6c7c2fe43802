"""Namespaces on the OpenAI Responses adapter: grouped as the caller declared them, calls read back by their
canonical name, a wrong-shaped ``namespace`` an invalid response (failover), never a guess."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.api.responses.tools import parse_tools
from gateway.providers.base import ErrorClass, ProviderError
from gateway.providers.openai_responses_output import response_from
from gateway.providers.openai_responses_params import native_members, translate_tool_choice, translate_tools


def member(name: str) -> dict[str, Any]:
    return {"type": "function", "name": name, "strict": True,
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}


def test_members_are_grouped_by_namespace_in_first_appearance_order() -> None:
    parsed = parse_tools([{"type": "namespace", "name": "b", "description": "B.", "tools": [member("x")]},
                          {"type": "function", "name": "top", "parameters": {"type": "object"}},
                          {"type": "namespace", "name": "a", "description": "A.", "tools": [member("y"),
                                                                                             member("z")]}])
    members = native_members(parsed.tools)
    assert members == {"b__x": ("b", "x"), "a__y": ("a", "y"), "a__z": ("a", "z")}
    sent = translate_tools(parsed.tools, members=members)
    # The canonical order (the caller's plain functions first): the same on every request of a conversation.
    assert [(t["type"], t["name"]) for t in sent] == [("function", "top"), ("namespace", "b"), ("namespace", "a")]
    assert sent[2]["tools"] == [member("y"), member("z")] and sent[1]["description"] == "B."
    assert translate_tools(parsed.tools)[1]["name"] == "b__x"  # no members given: flat, as before
    assert translate_tool_choice({"type": "function", "function": {"name": "a__z"}}, members=members) == {
        "type": "function", "name": "z", "namespace": "a"}


def response(item: dict[str, Any]) -> dict[str, Any]:
    return {"id": "resp_1", "status": "completed", "model": "gpt-5.2", "output": [item]}


def test_a_namespaced_call_reads_as_its_canonical_name() -> None:
    answer = response_from(response({"type": "function_call", "call_id": "c1", "name": "y", "namespace": "a",
                                     "arguments": "{}"}))
    assert answer.message["tool_calls"][0]["function"]["name"] == "a__y"
    custom = response_from(response({"type": "custom_tool_call", "call_id": "c2", "name": "p", "namespace": "a",
                                     "input": "diff"}))
    assert custom.message["tool_calls"][0]["function"]["name"] == "a__p"


@pytest.mark.parametrize("namespace", [42, ["a"], {"a": 1}])
def test_a_wrong_shaped_namespace_is_an_invalid_response(namespace: Any) -> None:
    with pytest.raises(ProviderError) as caught:
        response_from(response({"type": "function_call", "call_id": "c1", "name": "y", "namespace": namespace,
                                "arguments": "{}"}))
    assert caught.value.error_class is ErrorClass.INVALID_RESPONSE
