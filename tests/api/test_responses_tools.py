"""The Responses surface's tools: namespace, custom and hosted tools parsed, named, mapped back and rendered.

The parser is fed what Codex CLI sends (``tests/fixtures/codex/session.json``, recorded from the pinned
CLI) and hostile values (a namespace of 10,000 tools, names of 10 KB, a namespace in a namespace); the
renderer is fed the loop events a paused namespaced or custom call and a mapped web search produce.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.api.responses.calls import names_of
from gateway.api.responses.items import to_messages
from gateway.api.responses.render import ResponseBuilder
from gateway.api.responses.request import MAX_KEY_CHARS, parse_responses_request
from gateway.api.responses.tools import (
    MAX_NAME_CHARS,
    MAX_TOOL_DEFINITIONS,
    MAX_WIRE_NAME,
    parse_tools,
    qualified,
    tool_choice,
)
from gateway.canonical import HostedToolCall, TextDelta, Usage, custom_arguments
from gateway.errors import GatewayError
from gateway.loop.events import Finished, LoopResult

CODEX = orjson.loads((Path(__file__).resolve().parents[1] / "fixtures" / "codex" / "session.json").read_bytes())
FIRST, FOLLOW_UP = (request["body"] for request in CODEX["requests"][:2])
WIRE_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_-]{0,63}")
AGENTS = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.", "tools": [
    {"type": "function", "name": "spawn_agent", "description": "Spawn one.", "parameters": {"type": "object"}},
    {"type": "custom", "name": "script", "format": {"type": "grammar", "syntax": "regex", "definition": "[a-z]+"}}]}
PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files.",
         "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}


def error_of(body: Any) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        parse_responses_request(body)
    assert caught.value.status == 400
    return caught.value


# --- what Codex sends -------------------------------------------------------------------------------------


def test_codex_first_request_is_accepted() -> None:
    request = parse_responses_request(FIRST)
    names = [tool["function"]["name"] for tool in request.tools]
    assert names[:4] == ["exec_command", "write_stdin", "request_user_input", "view_image"]
    assert "multi_agent_v1__spawn_agent" in names and "multi_agent_v1__close_agent" in names
    assert all(WIRE_NAME.fullmatch(name) for name in names)
    assert request.hosted == [{"type": "web_search", "external_web_access": True}]
    assert request.names is not None and request.names.of("multi_agent_v1__spawn_agent").name == "spawn_agent"
    spawn = next(tool for tool in request.tools if tool["function"]["name"] == "multi_agent_v1__spawn_agent")
    assert spawn["function"]["description"].startswith("Tools for spawning and managing sub-agents.\n\n")
    # The fields of late 2026: a chat counterpart goes on, the rest is not sent; the Response repeats its own.
    assert request.params == {"parallel_tool_calls": True, "prompt_cache_key": "<uuid-1>"}
    assert request.include == ("reasoning.encrypted_content",) and not request.store and request.stream
    assert request.echo["prompt_cache_key"] == "<uuid-1>" and request.echo["reasoning"] == {"effort": None,
                                                                                          "summary": "auto"}
    assert request.echo["tools"] is FIRST["tools"]
    messages = to_messages(request.input, request.names).messages
    assert [m["role"] for m in messages] == ["developer", "developer", "user", "user"]


def test_codex_follow_up_reads_its_call_and_output() -> None:
    request = parse_responses_request(FOLLOW_UP)
    converted = to_messages(request.input, request.names)
    call, result = converted.messages[-2:]
    assert call["tool_calls"][0]["function"]["name"] == "exec_command" and result["role"] == "tool"
    assert converted.decisions == [{"tool_call_id": "call_scripted0001", "output": result["content"]}]


def test_the_late_fields_are_checked_and_passed_on() -> None:
    request = parse_responses_request({
        "model": "m", "input": "x", "safety_identifier": "user-42", "service_tier": "flex",
        "prompt_cache_retention": "24h", "top_logprobs": 5, "truncation": "auto", "client_metadata": {"a": "b"},
        "context_management": [{"type": "compaction"}], "include": ["web_search_call.action.sources"]})
    assert request.params == {"safety_identifier": "user-42", "service_tier": "flex", "prompt_cache_retention": "24h"}
    echo = request.echo
    assert (echo["top_logprobs"], echo["service_tier"], echo["truncation"]) == (5, "flex", "auto")
    assert error_of({"model": "m", "input": "x", "prompt_cache_key": "k" * (MAX_KEY_CHARS + 1)}).param == \
        "prompt_cache_key"
    assert error_of({"model": "m", "input": "x", "top_logprobs": 21}).param == "top_logprobs"
    assert error_of({"model": "m", "input": "x", "include": "all"}).param == "include"
    assert error_of({"model": "m", "input": "x", "include": ["x"] * 33}).param == "include"
    assert error_of({"model": "m", "input": "x", "client_metadata": "x"}).param == "client_metadata"


# --- names ------------------------------------------------------------------------------------------------


def test_namespaced_names_never_clash_and_fit_every_provider() -> None:
    parsed = parse_tools([
        {"type": "function", "name": "a__b__c"},
        {"type": "namespace", "name": "a__b", "description": "", "tools": [{"type": "function", "name": "c"}]},
        {"type": "namespace", "name": "a", "description": "", "tools": [{"type": "function", "name": "b__c"}]},
        {"type": "namespace", "name": "mcp.my-server", "description": "", "tools": [
            {"type": "function", "name": "x" * MAX_NAME_CHARS}, {"type": "function", "name": "9lives"}]},
    ])
    names = [tool["function"]["name"] for tool in parsed.tools]
    assert len(set(names)) == len(names) == 5 and names[0] == "a__b__c"
    assert all(WIRE_NAME.fullmatch(name) and len(name) <= MAX_WIRE_NAME for name in names[1:])
    assert parsed.names is not None
    for wire in names[1:]:
        tool = parsed.names.of(wire)
        assert tool is not None and parsed.names.wire_name(tool.namespace, tool.name) == wire
    # The same tools give the same names (a resend, a resume), and a tool gone keeps its would-be name.
    assert [t["function"]["name"] for t in parse_tools(parsed.echo).tools] == names
    assert parsed.names.wire_name("gone", "tool") == "gone__tool" == qualified("gone", "tool")
    assert qualified("ns", "t", {"ns__t"}) != "ns__t"


def test_tool_choice_names_the_tool_the_model_sees() -> None:
    names = parse_tools([AGENTS, PATCH]).names
    assert tool_choice({"type": "function", "name": "spawn_agent", "namespace": "multi_agent_v1"}, names) == {
        "type": "function", "function": {"name": "multi_agent_v1__spawn_agent"}}
    assert tool_choice({"type": "custom", "name": "apply_patch"}, names) == {
        "type": "function", "function": {"name": "apply_patch"}}
    assert tool_choice({"type": "web_search"}, names) == "auto"
    assert tool_choice({"type": "allowed_tools", "mode": "auto", "tools": [
        {"type": "web_search"}, {"type": "custom", "name": "script", "namespace": "multi_agent_v1"}]}, names) == {
        "type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [
            {"type": "function", "function": {"name": "multi_agent_v1__script"}}]}}


# --- hostile values ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("tools", "param"), [
    ([{"type": "namespace", "name": "n", "description": "", "tools": [{"type": "function", "name": f"f{i}"}
                                                                       for i in range(10_000)]}], "tools[0].tools"),
    ([{"type": "namespace", "name": f"n{j}", "description": "", "tools": [
        {"type": "function", "name": f"f{i}"} for i in range(250)]} for j in range(5)], "tools[4].tools"),
    ([{"type": "function", "name": "f" * 10_240}], "tools[0].name"),
    ([{"type": "namespace", "name": "n" * 10_240, "description": "", "tools": []}], "tools[0].name"),
    ([{"type": "namespace", "name": "n", "tools": [{"type": "function", "name": "f" * 10_240}]}],
     "tools[0].tools[0].name"),
    ([{"type": "custom", "name": "c" * 10_240}], "tools[0].name"),
    ([{"type": "namespace", "name": "n", "tools": [{"type": "namespace", "name": "m", "tools": []}]}],
     "tools[0].tools[0].type"),
    ([{"type": "namespace", "name": "n", "tools": "all"}], "tools[0].tools"),
    ([{"type": "namespace", "name": "n", "tools": [{"type": "web_search"}]}], "tools[0].tools[0].type"),
    ([{"type": "custom", "name": "c", "format": {"type": "grammar", "syntax": "lark", "definition": "x" * 100_001}}],
     "tools[0].format.definition"),
    ([{"type": "custom", "name": "c", "format": {"type": "json"}}], "tools[0].format"),
    ([{"type": "shell_script"}], "tools[0].type"),
])
def test_hostile_tools_are_refused_naming_the_part(tools: list[Any], param: str) -> None:
    assert error_of({"model": "m", "input": "x", "tools": tools}).param == param


def test_the_bound_counts_every_definition() -> None:
    at_bound = [{"type": "namespace", "name": f"n{j}", "description": "", "tools": [
        {"type": "function", "name": f"f{i}"} for i in range(MAX_TOOL_DEFINITIONS // 4)]} for j in range(4)]
    assert len(parse_responses_request({"model": "m", "input": "x", "tools": at_bound}).tools) == MAX_TOOL_DEFINITIONS
    over = [*at_bound, {"type": "custom", "name": "one_more"}]
    assert error_of({"model": "m", "input": "x", "tools": over}).param == "tools[4]"


@pytest.mark.parametrize("kind", ["web_search", "web_search_preview", "web_search_2025_08_26", "web_search_2027_01_01",
                                  "file_search", "code_interpreter", "computer_use_preview", "computer",
                                  "image_generation", "mcp", "local_shell", "shell", "apply_patch", "tool_search"])
def test_every_hosted_tool_is_accepted(kind: str) -> None:
    tool = {"type": kind, "server_label": "x", "server_url": "https://x"}
    assert parse_responses_request({"model": "m", "input": "x", "tools": [tool]}).hosted == [tool]


# --- input items ------------------------------------------------------------------------------------------


def test_namespaced_custom_and_hosted_items_become_the_transcript() -> None:
    request = parse_responses_request({"model": "m", "store": False, "tools": [AGENTS, PATCH], "input": [
        {"role": "user", "content": "go"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
        {"type": "function_call", "call_id": "c1", "name": "spawn_agent", "namespace": "multi_agent_v1",
         "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "local_shell_call", "call_id": "c3", "status": "completed", "action": {"type": "exec"}},
        {"type": "local_shell_call_output", "call_id": "c3", "output": "ok"},
        {"type": "function_call_output", "call_id": "c1", "output": "spawned"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "patched"}]})
    converted = to_messages(request.input, request.names)
    _user, assistant, first, second = converted.messages
    assert assistant["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "multi_agent_v1__spawn_agent", "arguments": "{}"}},
        {"id": "c2", "type": "custom", "function": {"name": "apply_patch",
                                                    "arguments": custom_arguments("*** Begin Patch")}}]
    assert (first["content"], second["content"]) == ("spawned", "patched")
    assert [d["tool_call_id"] for d in converted.decisions] == ["c1", "c2"]


# --- rendering --------------------------------------------------------------------------------------------


def paused_calls(calls: list[dict[str, Any]]) -> Finished:
    gateway = {"status": "paused", "answered_by": ["claude:x"],
               "pending": [{"tool_call_id": c["id"], "name": c["function"]["name"], "reason": "client"}
                           for c in calls]}
    return Finished(LoopResult("paused", "tool_calls", Usage(1, 1), gateway, calls, "m"))


def render(events: list[Any], tools: list[Any], sources: bool = False) -> tuple[ResponseBuilder, list[Any]]:
    builder = ResponseBuilder("resp_1", "route", {"tools": tools}, lambda name: "loopgate")
    builder.names = names_of(tools)
    builder.sources = sources
    builder.hosted_drops = {"claude:x": ("file_search",), "gemini:y": ("web_search",)}
    out = builder.start()
    for event in events:
        out.extend(builder.feed(event))
    return builder, out


def test_paused_calls_come_back_in_the_callers_terms() -> None:
    calls = [{"id": "c1", "type": "function", "function": {"name": "multi_agent_v1__spawn_agent", "arguments": "{}"}},
             {"id": "c2", "type": "custom", "function": {"name": "apply_patch",
                                                         "arguments": custom_arguments("*** Begin Patch")}},
             {"id": "c3", "type": "function", "function": {"name": "multi_agent_v1__script",
                                                           "arguments": '{"input": "abc"}'}}]
    builder, out = render([paused_calls(calls)], [AGENTS, PATCH])
    first, second, third = builder.response["output"]
    assert first == {"id": "fc_c1", "type": "function_call", "call_id": "c1", "name": "spawn_agent",
                     "namespace": "multi_agent_v1", "arguments": "{}", "status": "completed"}
    assert second == {"id": "ctc_c2", "type": "custom_tool_call", "call_id": "c2", "name": "apply_patch",
                      "input": "*** Begin Patch", "status": "completed"}
    assert third["type"] == "custom_tool_call" and third["namespace"] == "multi_agent_v1" and third["input"] == "abc"
    kinds = [event["type"] for event in out]
    assert kinds.count("response.custom_tool_call_input.delta") == 2
    assert {"item_id": "ctc_c2", "output_index": 1, "input": "*** Begin Patch"}.items() <= next(
        e for e in out if e["type"] == "response.custom_tool_call_input.done").items()
    # The targets that answered name what they dropped; the others do not.
    assert builder.response["gateway"]["warnings"] == [{
        "type": "hosted_tools_dropped", "target": "claude:x", "tools": ["file_search"],
        "message": builder.response["gateway"]["warnings"][0]["message"]}]


@pytest.mark.parametrize("sources", [False, True])
def test_a_web_search_is_an_item_of_its_own(sources: bool) -> None:
    search = HostedToolCall("web_search", "srvtoolu_1", {"type": "search", "query": "q", "sources": [
        {"type": "url", "url": "https://a"}]})
    done = Finished(LoopResult("completed", "stop", Usage(1, 1), {"status": "completed"}, [], "m"))
    builder, out = render([TextDelta("Let me look."), [search], TextDelta("Found it."), done], [], sources)
    message, call, answer = builder.response["output"]
    assert call == {"id": "ws_srvtoolu_1", "type": "web_search_call", "status": "completed",
                    "action": {"type": "search", "query": "q", **({"sources": [{"type": "url", "url": "https://a"}]}
                                                                   if sources else {})}}
    assert message["content"][0]["text"] == "Let me look." and answer["content"][0]["text"] == "Found it."
    kinds = [event["type"] for event in out]
    assert kinds.index("response.web_search_call.searching") < kinds.index("response.web_search_call.completed")
    assert "warnings" not in builder.response["gateway"]  # no target answered
