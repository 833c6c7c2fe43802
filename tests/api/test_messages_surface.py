"""The Messages surface's parser and renderer on their own: Claude Code's recorded requests, hostile bodies,
and the block state machine that turns loop events into a message and its stream."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.api.messages import signature
from gateway.api.messages.errors import with_anthropic_headers
from gateway.api.messages.render import MessageBuilder
from gateway.api.messages.request import MAX_BETAS, MAX_STOP_SEQUENCES, MAX_TOOLS, parse_messages_request
from gateway.canonical import Answering, ReasoningDelta, ReasoningSignature, RedactedReasoning, TextDelta, Usage
from gateway.errors import GatewayError
from gateway.loop.events import Finished, LoopResult, ToolFinished, ToolStarted
from gateway.loop.pairing import pairing_problem

SESSION = json.loads((Path(__file__).parents[1] / "fixtures" / "claude_code" / "session.json").read_text())


def recorded(index: int) -> tuple[dict[str, Any], str]:
    request = SESSION["requests"][index]
    return request["body"], request["headers"].get("anthropic-beta", "")


@pytest.mark.parametrize("index", [0, 1])
def test_claude_codes_own_requests_parse_into_a_paired_canonical_transcript(index: int) -> None:
    body, betas = recorded(index)
    parsed = parse_messages_request(body, betas)
    assert pairing_problem(parsed.messages) is None
    assert parsed.messages[0]["role"] == "system" and parsed.messages[0]["anthropic_content"] == body["system"]
    assert parsed.stream is True and parsed.params["max_completion_tokens"] == body["max_tokens"]
    assert parsed.params["reasoning_effort"] in ("low", "medium", "high")
    assert {"thinking", "output_config", "context_management", "metadata"} <= parsed.native.fields.keys()
    assert parsed.native.tools == body["tools"], "the caller's tools go to Anthropic verbatim"
    assert "Bash" in parsed.tool_names and "Bash" in [t["function"]["name"] for t in parsed.tools]
    assert parsed.native.headers["anthropic-beta"].startswith("claude-code-")
    for message in parsed.messages:  # every canonical message keeps the caller's blocks for Anthropic
        assert "anthropic_content" in message


def test_the_tool_result_request_splits_results_before_the_text_beside_them() -> None:
    body, betas = recorded(1)
    parsed = parse_messages_request(body, betas)
    roles = [m["role"] for m in parsed.messages]
    assert "tool" in roles
    tool = next(m for m in parsed.messages if m["role"] == "tool")
    assert "loopgate-ok" in tool["content"]
    assert tool["anthropic_content"][0]["type"] == "tool_result"


def test_thinking_blocks_the_gateway_signed_come_back_as_reasoning_and_edited_ones_are_dropped() -> None:
    ours = {"type": "thinking", "thinking": "Paris is in France.", "signature": signature.issue("Paris is in France.")}
    edited = {**ours, "thinking": "Paris is in Spain."}
    anthropic = {"type": "thinking", "thinking": "hm", "signature": "EqQBCkgIARABGAIiQL"}
    mine = {"type": "mcp_tool_use", "id": "toolu_1", "name": "get_weather", "server_name": "loopgate", "input": {}}
    body = {"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [ours, edited, anthropic, mine,
                                          {"type": "mcp_tool_result", "tool_use_id": "toolu_1", "content": []},
                                          {"type": "text", "text": "Sunny."}]},
        {"role": "user", "content": "thanks"}]}
    assistant = parse_messages_request(body).messages[1]
    assert assistant["reasoning_content"] == "Paris is in France."
    assert assistant["thinking_blocks"] == [anthropic]
    assert assistant["anthropic_content"] == [anthropic, {"type": "text", "text": "Sunny."}]
    assert assistant["content"] == "Sunny."


@pytest.mark.parametrize(("body", "param"), [
    ([], None),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}, "model"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ({"model": "m", "max_tokens": True, "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ({"model": "m", "max_tokens": 5, "messages": []}, "messages"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]}, "messages.0.role"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": 3}]}, "messages.0.content"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"text": "x"}]}]},
     "messages.0.content.0"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "x", "input": "not an object"}]}]}, "messages.0.content.0.input"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "x", "input": {}}]}, {"role": "user", "content": "no result"}]},
     "messages"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "t"}]},
     "tools.0.input_schema"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
      "tool_choice": {"type": "tool"}}, "tool_choice.name"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
      "thinking": {"type": "enabled", "budget_tokens": "lots"}}, "thinking.budget_tokens"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
      "stop_sequences": ["a", 1]}, "stop_sequences"),
    ({"model": "m", "max_tokens": 5, "system": [{"type": "image"}], "messages": [{"role": "user", "content": "x"}]},
     "system.0"),
])
def test_wrong_bodies_are_400s_naming_the_field(body: Any, param: str | None) -> None:
    with pytest.raises(GatewayError) as refused:
        parse_messages_request(body)
    assert refused.value.status == 400 and refused.value.param == param


def test_mapped_parameters_for_other_formats() -> None:
    parsed = parse_messages_request({
        "model": "m", "max_tokens": 300, "messages": [{"role": "user", "content": "x"}], "temperature": 0.2,
        "top_k": 5, "stop_sequences": ["END"], "metadata": {"user_id": "u"}, "service_tier": "auto",
        "thinking": {"type": "enabled", "budget_tokens": 8000},
        "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "tools": [{"name": "t", "input_schema": {"type": "object"}}, {"type": "web_search_20250305", "name": "web"}]})
    assert parsed.params == {"max_completion_tokens": 300, "temperature": 0.2, "stop": ["END"],
                             "reasoning_effort": "medium", "parallel_tool_calls": False,
                             "response_format": {"type": "json_schema",
                                                 "json_schema": {"name": "output", "schema": {"type": "object"}}}}
    assert parsed.tool_choice == "required"
    assert [t["function"]["name"] for t in parsed.tools] == ["t"] and parsed.tool_names == ["t", "web"]
    assert {"top_k", "metadata", "service_tier", "thinking"} <= parsed.native.fields.keys()


def finished(calls: list[dict[str, Any]] | None = None, status: str = "completed") -> Finished:
    pending = [{"tool_call_id": c["id"], "name": c["function"]["name"], "reason": "client"} for c in calls or ()]
    gateway = {"status": status, "pending": pending} if status == "paused" else {"status": status}
    return Finished(LoopResult(status, "tool_calls" if calls else "stop",  # type: ignore[arg-type]
                               Usage(100, 20, 30, 0, 10), gateway, calls or [], "claude-x"))


EVENTS = [
    [Answering("claude-x"), ReasoningDelta("First."), ReasoningSignature("sigA"), ReasoningDelta("\n\nSecond."),
     ReasoningSignature("sigB"), TextDelta("Let me check.")],
    ToolStarted("c1", "get_weather", '{"city": "Paris"}'),
    ToolFinished("c1", "get_weather", "ok", 1.0, "Paris: sunny"),
    [Answering("gpt-y"), ReasoningDelta("Foreign thought."), TextDelta("\n\n"), TextDelta("Sunny.")],
    [RedactedReasoning("opaque")],
    finished([{"id": "c2", "type": "function", "function": {"name": "run_bash", "arguments": '{"command": "ls"}'}}],
             "paused"),
]


def test_the_builder_renders_the_same_blocks_in_both_modes() -> None:
    whole = MessageBuilder("route", "route", False, False)
    streamed = MessageBuilder("route", "route", True, False)
    frames = []
    for event in EVENTS:
        whole.feed(event)
        frames.extend(streamed.feed(event))
    message = whole.message()
    assert [b["type"] for b in message["content"]] == ["thinking", "thinking", "text", "thinking", "text",
                                                        "redacted_thinking", "tool_use"]
    first, second = message["content"][0], message["content"][1]
    assert (first["thinking"], first["signature"]) == ("First.", "sigA")
    assert (second["thinking"], second["signature"]) == ("Second.", "sigB"), "the joiner is not the block's text"
    foreign = message["content"][3]
    assert signature.intact(foreign["thinking"], foreign["signature"])
    assert message["content"][-1] == {"type": "tool_use", "id": "c2", "name": "run_bash", "input": {"command": "ls"}}
    assert message["stop_reason"] == "tool_use" and message["model"] == "claude-x"
    assert message["usage"] == {"input_tokens": 60, "output_tokens": 20, "cache_creation_input_tokens": 10,
                                "cache_read_input_tokens": 30}
    # The stream says the same blocks, in Anthropic's event order.
    events = [orjson.loads(frame.split(b"data: ", 1)[1]) for frame in b"".join(frames).split(b"\n\n") if frame]
    kinds = [e["type"] for e in events]
    assert kinds[-2:] == ["message_delta", "message_stop"] and "ping" in kinds
    assert streamed.content == message["content"]
    rebuilt: dict[int, str] = {}
    for event in events:
        if event["type"] == "content_block_delta" and event["delta"]["type"] == "thinking_delta":
            rebuilt[event["index"]] = rebuilt.get(event["index"], "") + event["delta"]["thinking"]
    assert rebuilt[1] == "Second."
    stop = events[-2]
    assert stop["delta"]["stop_reason"] == "tool_use" and stop["gateway"]["status"] == "paused"


def test_server_tools_become_mcp_blocks_under_the_beta() -> None:
    builder = MessageBuilder("route", "route", False, True)
    for event in [*EVENTS[1:3], finished()]:
        builder.feed(event)
    kinds = [b["type"] for b in builder.message()["content"]]
    assert kinds == ["mcp_tool_use", "mcp_tool_result"]
    assert builder.message()["content"][0]["input"] == {"city": "Paris"}


def test_rate_limit_headers_get_their_anthropic_twins() -> None:
    headers = [(b"x-request-id", b"req_1"), (b"x-ratelimit-limit-requests", b"60"),
               (b"x-ratelimit-remaining-requests", b"59"), (b"x-ratelimit-reset-requests", b"1m30s")]
    before = datetime.now(UTC).replace(microsecond=0)
    out = dict(with_anthropic_headers(headers))
    after = datetime.now(UTC)
    assert out[b"request-id"] == b"req_1"
    assert out[b"anthropic-ratelimit-requests-limit"] == b"60"
    assert out[b"anthropic-ratelimit-requests-remaining"] == b"59"
    reset = datetime.fromisoformat(out[b"anthropic-ratelimit-requests-reset"].decode().replace("Z", "+00:00"))
    assert (reset - before).total_seconds() >= 90 and (reset - after).total_seconds() <= 90  # no clock window


def test_caller_counts_are_bounded() -> None:
    base = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    tool = {"name": "t", "input_schema": {"type": "object"}}
    with pytest.raises(GatewayError) as tools:
        parse_messages_request({**base, "tools": [{**tool, "name": f"t{i}"} for i in range(MAX_TOOLS + 1)]})
    assert tools.value.param == "tools"
    with pytest.raises(GatewayError) as stops:
        parse_messages_request({**base, "stop_sequences": ["s"] * (MAX_STOP_SEQUENCES + 1)})
    assert stops.value.param == "stop_sequences"
    many = parse_messages_request(base, ",".join(f"beta-{i}" for i in range(10_000)))
    assert len(many.native.headers["anthropic-beta"].split(",")) == MAX_BETAS
