"""The Responses request parser and the input item conversion: bounds, errors naming the param, mappings."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.api.responses.echo import ECHO_DEFAULTS, ECHO_FIELDS
from gateway.api.responses.items import to_messages
from gateway.api.responses.request import (
    MAX_INPUT_ITEMS,
    MAX_METADATA_KEYS,
    parse_responses_request,
)
from gateway.api.responses.tools import MAX_TOOLS
from gateway.errors import GatewayError


def param_of(body: Any) -> str | None:
    with pytest.raises(GatewayError) as caught:
        parse_responses_request(body)
    assert caught.value.status == 400
    return caught.value.param


def test_minimal_string_input() -> None:
    parsed = parse_responses_request({"model": "m", "input": "hi"})
    assert parsed.input == [{"type": "message", "role": "user", "content": "hi"}]
    assert parsed.store is True and parsed.stream is False and parsed.background is False
    assert parsed.params == {}


def test_mappings_to_chat_parameters() -> None:
    parsed = parse_responses_request({
        "model": "m", "input": "hi", "max_output_tokens": 100, "temperature": 0.2, "top_p": 0.9, "user": "u1",
        "parallel_tool_calls": False, "reasoning": {"effort": "high"}, "text": {"format": {"type": "json_object"}},
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "tool_choice": {"type": "function", "name": "f"}, "seed": 7, "include": ["reasoning.encrypted_content"],
        "background": True, "metadata": {"a": "b"}, "gateway": {"max_tool_iterations": 2, "headless": True}})
    assert parsed.params == {"seed": 7, "temperature": 0.2, "top_p": 0.9, "user": "u1", "parallel_tool_calls": False,
                             "max_completion_tokens": 100, "response_format": {"type": "json_object"},
                             "reasoning_effort": "high"}
    assert parsed.tools == [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    assert parsed.tool_choice == {"type": "function", "function": {"name": "f"}}
    assert parsed.background is True and parsed.headless is True and parsed.max_tool_iterations == 2
    assert parsed.echo["metadata"] == {"a": "b"} and parsed.echo["tools"][0]["name"] == "f"


def test_json_schema_format() -> None:
    parsed = parse_responses_request({"model": "m", "input": "x", "text": {"format": {
        "type": "json_schema", "name": "n", "schema": {"type": "object"}, "strict": True}}})
    assert parsed.params["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "n", "schema": {"type": "object"}, "strict": True}}
    assert param_of({"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "schema": {}}}}) == \
        "text.format.name"
    assert param_of({"model": "m", "input": "x", "text": {"format": {"type": "yaml"}}}) == "text.format.type"


@pytest.mark.parametrize(("body", "param"), [
    ([], None),
    ({"input": "x"}, "model"),
    ({"model": "", "input": "x"}, "model"),
    ({"model": "m", "input": 3}, "input"),
    ({"model": "m", "input": [1]}, "input[0]"),
    ({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
    ({"model": "m", "input": "x", "stream": "yes"}, "stream"),
    ({"model": "m", "input": "x", "store": 1}, "store"),
    ({"model": "m", "input": "x", "temperature": "hot"}, "temperature"),
    ({"model": "m", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "m", "input": "x", "max_output_tokens": 2**40}, "max_output_tokens"),
    ({"model": "m", "input": "x", "max_tool_calls": -1}, "max_tool_calls"),
    ({"model": "m", "input": "x", "truncation": "middle"}, "truncation"),
    ({"model": "m", "input": "x", "previous_response_id": "r" * 101}, "previous_response_id"),
    ({"model": "m", "input": "x", "conversation": {"id": "c"}}, "conversation"),
    ({"model": "m", "input": "x", "prompt": {"id": "p"}}, "prompt"),
    ({"model": "m", "input": "x", "tools": [{"type": "namespace", "name": "n", "tools": [
        {"type": "namespace", "name": "inner", "tools": []}]}]}, "tools[0].tools[0].type"),
    ({"model": "m", "input": "x", "tools": [{"type": "custom", "name": "c", "format": {
        "type": "grammar", "syntax": "ebnf", "definition": "x"}}]}, "tools[0].format.syntax"),
    ({"model": "m", "input": "x", "tools": [{"type": "function"}]}, "tools[0].name"),
    ({"model": "m", "input": "x", "tool_choice": {"type": "custom"}}, "tool_choice"),
    ({"model": "m", "input": "x", "tool_choice": "sometimes"}, "tool_choice"),
    ({"model": "m", "input": "x", "metadata": {"k": 1}}, "metadata.k"),
    ({"model": "m", "input": "x", "metadata": {"k" * 65: "v"}}, "metadata"),
    ({"model": "m", "input": "x", "gateway": {"headless": "no"}}, "gateway.headless"),
    ({"model": "m", "input": "x", "gateway": {"max_tool_iterations": -2}}, "gateway.max_tool_iterations"),
])
def test_errors_name_the_parameter(body: Any, param: str | None) -> None:
    assert param_of(body) == param


def test_counts_are_bounded() -> None:
    many = [{"role": "user", "content": "x"}] * (MAX_INPUT_ITEMS + 1)
    assert param_of({"model": "m", "input": many}) == "input"
    tools = [{"type": "function", "name": f"f{i}"} for i in range(MAX_TOOLS + 1)]
    assert param_of({"model": "m", "input": "x", "tools": tools}) == "tools"
    metadata = {f"k{i}": "v" for i in range(MAX_METADATA_KEYS + 1)}
    assert param_of({"model": "m", "input": "x", "metadata": metadata}) == "metadata"


def items(*raw: dict[str, Any]) -> list[dict[str, Any]]:
    return parse_responses_request({"model": "m", "input": list(raw)}).input


def test_output_items_come_back_as_the_transcript() -> None:
    converted = to_messages(items(
        {"role": "user", "content": [{"type": "input_text", "text": "hi"},
                                     {"type": "input_image", "image_url": "data:image/png;base64,AA"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "mcp_call", "id": "mcp_call_1", "name": "get_weather", "arguments": "{}", "output": "sunny",
         "server_label": "loopgate"},
        {"type": "mcp_call", "id": "mcp_call_2", "name": "explode", "arguments": "{}", "server_label": "loopgate",
         "error": {"type": "mcp_tool_execution_error", "content": "boom"}},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
    ))
    assert converted.messages == [
        {"role": "user", "content": [{"type": "text", "text": "hi"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]},
        {"role": "assistant", "content": "Checking.", "reasoning_content": "think", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
            {"id": "call_2", "type": "function", "function": {"name": "explode", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "boom"},
        {"role": "assistant", "content": "Done."},
    ]
    assert converted.decisions == [] and converted.orphan is None


def test_trailing_answers_become_decisions() -> None:
    converted = to_messages(items(
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
        {"type": "mcp_approval_request", "id": "mcpr_c2", "name": "delete", "arguments": "{}", "server_label": "l"},
        {"type": "function_call_output", "call_id": "c1", "output": "x"},
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_c2", "approve": False, "reason": "no"},
    ))
    assert converted.decisions == [{"tool_call_id": "c1", "output": "x"},
                                   {"tool_call_id": "c2", "approve": False, "reason": "no"}]
    assert converted.messages[-1]["role"] == "tool" and "no" in converted.messages[-1]["content"]
    assert not converted.approved


def test_an_approved_call_then_its_execution_is_one_turn() -> None:
    converted = to_messages(items(
        {"role": "user", "content": "go"},
        {"type": "mcp_approval_request", "id": "mcpr_c2", "name": "delete", "arguments": "{}", "server_label": "l"},
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_c2", "approve": True},
        {"type": "mcp_call", "id": "mcp_c2", "name": "delete", "arguments": "{}", "output": "deleted",
         "server_label": "l", "approval_request_id": "mcpr_c2"},
        {"type": "message", "role": "assistant", "content": "ok"},
    ))
    assert [m["role"] for m in converted.messages] == ["user", "assistant", "tool", "assistant"]
    assert converted.messages[2]["content"] == "deleted" and converted.decisions == []


def test_an_output_of_text_parts_is_their_text() -> None:
    converted = to_messages(items(
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "shipped "},
                                                                      {"type": "input_text", "text": "today"}]},
    ))
    assert converted.messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": "shipped today"}


def test_answers_without_their_calls_are_orphans() -> None:
    converted = to_messages(items({"type": "function_call_output", "call_id": "c9", "output": "x"}))
    assert converted.orphan == "input[0]" and converted.decisions == [{"tool_call_id": "c9", "output": "x"}]


@pytest.mark.parametrize(("item", "param"), [
    ({"type": "message", "role": "tool", "content": "x"}, "input[0].role"),
    ({"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}, "input[0].content[0].type"),
    ({"role": "user", "content": 5}, "input[0].content"),
    ({"type": "function_call", "name": "f", "arguments": "{}"}, "input[0].call_id"),
    ({"type": "mcp_approval_response", "approval_request_id": "a", "approve": "yes"}, "input[0].approve"),
    ({"type": "reasoning", "summary": "not a list"}, "input[0].summary"),
    ({"type": "function_call_output", "call_id": "c1", "output": {"x": 1}}, "input[0].output"),
    ({"type": "function_call_output", "call_id": "c1", "output": [
        {"type": "input_text", "text": "see"}, {"type": "input_image", "image_url": "data:image/png;base64,AA"}]},
     "input[0].output[1].type"),
    ({"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": 5}]},
     "input[0].output[0].text"),
])
def test_bad_items_name_the_parameter(item: dict[str, Any], param: str) -> None:
    with pytest.raises(GatewayError) as caught:
        to_messages(items(item))
    assert caught.value.param == param


def test_echo_has_every_field_in_the_response_order() -> None:
    """The builder copies a Response layout keyed by ``ECHO_FIELDS``: a request with options fills all, in order; a
    plain one all but ``ECHO_DEFAULTS``' (which the layout holds already: fewer keys to copy on the common path)."""
    plain = parse_responses_request({"model": "m", "input": "x"}).echo
    assert tuple(plain) == tuple(name for name in ECHO_FIELDS if name not in ECHO_DEFAULTS)
    body = {"model": "m", "input": "x", "temperature": 0.5, "metadata": {"a": "b"}, "truncation": "auto"}
    assert tuple(parse_responses_request(body).echo) == ECHO_FIELDS


# Every top-level check in the order the parser runs them: (field, a value it refuses, the param the error names).
CHECK_ORDER: list[tuple[str, Any, str]] = [
    ("conversation", {"id": "c"}, "conversation"), ("prompt", {"id": "p"}, "prompt"), ("model", "", "model"),
    ("input", 3, "input"), ("instructions", 5, "instructions"), ("tools", "all", "tools"),
    ("tool_choice", "sometimes", "tool_choice"), ("stream", "yes", "stream"), ("store", 1, "store"),
    ("background", "no", "background"), ("parallel_tool_calls", "yes", "parallel_tool_calls"),
    ("previous_response_id", "", "previous_response_id"), ("max_tool_calls", -1, "max_tool_calls"),
    ("max_output_tokens", 0, "max_output_tokens"), ("temperature", "hot", "temperature"), ("top_p", "x", "top_p"),
    ("user", 5, "user"), ("truncation", "middle", "truncation"), ("metadata", [], "metadata"),
    ("text", "plain", "text"), ("reasoning", "hard", "reasoning"), ("gateway", "on", "gateway"),
]


@pytest.mark.parametrize("first", range(len(CHECK_ORDER)), ids=[name for name, _, _ in CHECK_ORDER])
def test_an_error_names_the_first_bad_field_in_the_documented_order(first: int) -> None:
    body: dict[str, Any] = {"model": "m", "input": "x"}
    body.update({name: bad for name, bad, _ in CHECK_ORDER[first:]})
    assert param_of(body) == CHECK_ORDER[first][2]


@pytest.mark.parametrize(("fields", "param"), [
    ({"text": {"format": "json", "verbosity": 1}}, "text.format"),
    ({"text": {"verbosity": 1}}, "text.verbosity"),
    ({"text": {"format": {"type": "json_schema", "name": "n", "schema": "s"}}}, "text.format.schema"),
    ({"text": {"format": {"type": "json_schema", "name": "n", "schema": {}, "strict": "y"}}}, "text.format.strict"),
    ({"reasoning": {"effort": 1, "summary": 2}}, "reasoning.effort"),
    ({"reasoning": {"summary": 2}}, "reasoning.summary"),
    ({"gateway": {"max_tool_iterations": -1, "headless": "x", "stream_rescue": "y"}}, "gateway.max_tool_iterations"),
    ({"gateway": {"headless": "x", "stream_rescue": "y"}}, "gateway.headless"),
    ({"gateway": {"stream_rescue": "y"}}, "gateway.stream_rescue"),
    ({"tools": [{"type": "function", "name": "f"}] * 2 + ["f"]}, "tools[2]"),
    ({"tools": [{"type": "shell_script"}]}, "tools[0].type"),
    ({"tool_choice": {"type": "allowed_tools", "mode": "any", "tools": []}}, "tool_choice"),
    ({"tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"name": 1}]}}, "tool_choice.tools"),
    ({"metadata": {f"k{i}": "v" for i in range(MAX_METADATA_KEYS)} | {"k0": 1}}, "metadata.k0"),
])
def test_nested_checks_name_the_first_bad_part(fields: dict[str, Any], param: str) -> None:
    assert param_of({"model": "m", "input": "x", **fields}) == param


def test_the_gateway_options_and_the_rest_reach_the_request() -> None:
    parsed = parse_responses_request({
        "model": "m", "input": "x", "previous_response_id": "resp_1", "max_tool_calls": 3, "truncation": "auto",
        "text": {"format": {"type": "text"}, "verbosity": "low"}, "reasoning": {"summary": "auto"},
        "gateway": {"stream_rescue": "off"}})
    assert parsed.previous_response_id == "resp_1" and parsed.max_tool_calls == 3
    assert parsed.stream_rescue is False and parsed.max_tool_iterations is None and parsed.headless is False
    assert parsed.params == {"verbosity": "low"}
    assert parsed.echo["truncation"] == "auto" and parsed.echo["text"] == {"format": {"type": "text"}}
    assert parsed.echo["reasoning"] == {"effort": None, "summary": "auto"}
    assert parsed.echo["parallel_tool_calls"] is True and parsed.echo["temperature"] == 1.0


def test_a_trailing_approval_is_a_decision_with_no_result_yet() -> None:
    converted = to_messages(items(
        {"role": "user", "content": "go"},
        {"type": "mcp_approval_request", "id": "mcpr_c2", "name": "delete", "arguments": "{}", "server_label": "l"},
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_c2", "approve": True},
    ))
    assert converted.approved and converted.orphan is None
    assert converted.decisions == [{"tool_call_id": "c2", "approve": True, "reason": None}]
    assert [m["role"] for m in converted.messages] == ["user", "assistant"]  # run by the paused loop, not here


def test_answers_followed_by_a_message_are_history_not_decisions() -> None:
    converted = to_messages(items(
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": ""},
        {"type": "function_call_output", "call_id": "c1", "output": "x"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "so"}]},
        {"type": "message", "role": "assistant", "content": "x it is"},
        {"role": "developer", "content": "be brief"},
    ))
    assert converted.decisions == [] and not converted.approved
    assert converted.messages == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
        {"role": "assistant", "content": "x it is", "reasoning_content": "so"},
        {"role": "developer", "content": "be brief"},
    ]
