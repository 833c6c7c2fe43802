"""A ``/v1/messages`` caller's request reaches an Anthropic target as the caller wrote it.

The canonical transcript here is built the way the Messages API layer builds it (``canonical_of``
follows the contract in the brief of ``gateway/canonical/types.py``: ``anthropic_content`` on every
message the caller sent, tool results as tool messages placed before their user message, the
caller's fields/tools/betas in ``NativeRequest``), so "the upstream body equals the caller's body"
is checked end to end: parse, then ``build_request``. Compared as parsed JSON, not bytes.

Also: the response keeps the native content (whole and streamed alike), count_tokens, and the other
wire formats never sending the artifact.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from gateway.canonical import Message, ModelRequest, NativeRequest
from gateway.config.model import ProviderConfig
from gateway.providers.anthropic import AnthropicAdapter
from gateway.providers.anthropic_stream import response_from_message
from gateway.providers.base import ErrorClass, ProviderError, SSEEvent
from gateway.providers.gemini import GeminiAdapter
from gateway.providers.openai import OpenAIAdapter
from tests.fakes.anthropic_rules import anthropic_request_problems
from tests.providers.streams import parse_in_pieces, parse_stream

ADAPTER = AnthropicAdapter()
PROVIDER = ProviderConfig(name="claude", type="anthropic", base_url="https://api.anthropic.com", api_key="sk-test",
                          default_max_tokens=8192)
MODEL = "claude-opus-4-8"
CALLER_BETAS = "context-management-2025-06-27,interleaved-thinking-2025-05-14"
SIGNATURE = "EqQBCkYIBxgCKkBzeW50aGV0aWMtc2lnbmF0dXJlLW5vdC1yZWFs" * 3
# The route's server tool, as the engine hands it over (canonical).
SERVER_TOOL = {"type": "function", "function": {
    "name": "fetch_url", "description": "Fetch a web page.",
    "parameters": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}}}
SERVER_TOOL_NATIVE = {"name": "fetch_url", "description": "Fetch a web page.",
                      "input_schema": SERVER_TOOL["function"]["parameters"]}
READ_SCHEMA = {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"],
               "additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"}

# What Claude Code sends, in substance: cached system blocks, adaptive thinking with effort, a
# context-management edit, deferred and strict tools, a typed server tool, a mid-conversation
# system message, a signed thinking block, citations, a failed tool result, a beta field.
CLAUDE_CODE_BODY: dict[str, Any] = {
    "model": "claude-opus-4-8",
    "max_tokens": 32000,
    "system": [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.0"},
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
         "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Working directory: /repo\nIs a git repository: true",
         "cache_control": {"type": "ephemeral", "ttl": "1h"}},
    ],
    "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>CLAUDE.md: run pytest -q</system-reminder>"},
            {"type": "text", "text": "Fix the failing test in tests/test_app.py",
             "cache_control": {"type": "ephemeral"}},
        ]},
        {"role": "system", "content": "The user enabled auto-accept edits."},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Read the test before touching anything.", "signature": SIGNATURE},
            {"type": "text", "text": "Pytest collects test_*.py files.", "citations": [
                {"type": "char_location", "cited_text": "test_*.py", "document_index": 0,
                 "document_title": "pytest docs", "start_char_index": 10, "end_char_index": 19}]},
            {"type": "tool_use", "id": "toolu_01ReadAbc", "name": "Read",
             "input": {"file_path": "/repo/tests/test_app.py"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01ReadAbc", "is_error": True,
             "content": [{"type": "text", "text": "<tool_use_error>File does not exist.</tool_use_error>"}]},
            {"type": "text", "text": "It moved to tests/unit/test_app.py", "cache_control": {"type": "ephemeral"}},
        ]},
    ],
    "tools": [
        {"name": "Read", "description": "Reads a file from the local filesystem.", "input_schema": READ_SCHEMA},
        {"name": "Bash", "description": "Runs a shell command.", "defer_loading": True,
         "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
        {"name": "Edit", "description": "Edits a file.", "strict": True, "eager_input_streaming": True,
         "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"},
                                                           "old_string": {"type": "string"},
                                                           "new_string": {"type": "string"}}},
         "cache_control": {"type": "ephemeral"}},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5,
         "allowed_domains": ["docs.pytest.org"]},
    ],
    "tool_choice": {"type": "auto"},
    "thinking": {"type": "adaptive"},
    "output_config": {"effort": "high"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns",
                                                                                 "value": 1}}]},
    "metadata": {"user_id": "user_2f1e_account_9a7c_session_4b3d"},
    "temperature": 1,
    "stream": True,
    "speculative_beta_field": {"enabled": True, "level": 3},
}

# --- the API layer's side, as the contract describes it ----------------------------------------------

_NOT_FIELDS = ("model", "messages", "system", "tools", "tool_choice", "stream")


def _text(blocks: Any) -> str | None:
    if isinstance(blocks, str):
        return blocks
    return "".join(b["text"] for b in blocks if b.get("type") == "text") or None


def _canonical_messages(body: dict[str, Any]) -> list[Message]:
    out: list[Message] = []
    if "system" in body:
        out.append({"role": "system", "content": _text(body["system"]), "anthropic_content": body["system"]})
    for message in body["messages"]:
        content = message["content"]
        if message["role"] == "system":
            out.append({"role": "system", "content": _text(content), "anthropic_content": content})
        elif message["role"] == "assistant":
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
            calls = [{"id": b["id"], "type": "function",
                      "function": {"name": b["name"], "arguments": orjson.dumps(b["input"]).decode()}}
                     for b in blocks if b["type"] == "tool_use"]
            canonical: Message = {"role": "assistant", "content": _text(blocks), "anthropic_content": content}
            if calls:
                canonical["tool_calls"] = calls
            thinking = [b for b in blocks if b["type"] in ("thinking", "redacted_thinking")]
            if thinking:
                canonical["thinking_blocks"] = thinking
            out.append(canonical)
        elif isinstance(content, str):
            out.append({"role": "user", "content": content, "anthropic_content": content})
        else:
            rest = [b for b in content if b["type"] != "tool_result"]
            for result in (b for b in content if b["type"] == "tool_result"):
                out.append({"role": "tool", "tool_call_id": result["tool_use_id"],
                            "content": _text(result.get("content") or ""), "anthropic_content": [result]})
            if rest:
                out.append({"role": "user", "content": _text(rest), "anthropic_content": rest})
    return out


def _canonical_tool(tool: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": tool["name"], "description": tool.get("description", ""),
                                             "parameters": tool["input_schema"]}}


def canonical_of(body: dict[str, Any], server_tools: list[dict[str, Any]] | None = None,
                 betas: str | None = CALLER_BETAS) -> ModelRequest:
    """The ModelRequest the engine hands an adapter for this /v1/messages body (first iteration)."""
    custom = [_canonical_tool(t) for t in body.get("tools", ()) if "input_schema" in t]
    choice = body.get("tool_choice") or {}
    canonical_choice = {"auto": "auto", "any": "required", "none": "none"}.get(choice.get("type", ""))
    if choice.get("type") == "tool":
        canonical_choice = {"type": "function", "function": {"name": choice["name"]}}
    params = {"parallel_tool_calls": False} if choice.get("disable_parallel_tool_use") else {}
    native = NativeRequest("anthropic", {k: v for k, v in body.items() if k not in _NOT_FIELDS},
                           list(body.get("tools", ())), {"anthropic-beta": betas} if betas else {})
    tools = [*(server_tools if server_tools is not None else [SERVER_TOOL]), *custom]
    return ModelRequest(messages=_canonical_messages(body), tools=tools,
                        tool_choice=canonical_choice if tools else None, params=params, native=native)


def upstream(request: ModelRequest, stream: bool = True, provider: ProviderConfig = PROVIDER) -> dict[str, Any]:
    return orjson.loads(ADAPTER.build_request(request, provider, MODEL, stream).body)


def expected_body(body: dict[str, Any], *extra_tools: dict[str, Any]) -> dict[str, Any]:
    return {**body, "model": MODEL, "tools": [*body["tools"], *extra_tools]}


# --- request: the caller's body, verbatim ---------------------------------------------------------


def test_claude_code_body_reaches_anthropic_as_sent_plus_the_server_tool() -> None:
    body = copy.deepcopy(CLAUDE_CODE_BODY)
    request = canonical_of(body)
    sent = ADAPTER.build_request(request, PROVIDER, MODEL, stream=True)
    assert orjson.loads(sent.body) == expected_body(CLAUDE_CODE_BODY, SERVER_TOOL_NATIVE)
    # The strict fake knows no beta fields, typed tools or mid-conversation system messages; the rest holds.
    unmodelled = ("speculative_beta_field:", "messages.1.role:", "tools.1.", "tools.2.", "tools.3.")
    assert [p for p in anthropic_request_problems(orjson.loads(sent.body)) if not p.startswith(unmodelled)] == []
    assert sent.url == "https://api.anthropic.com/v1/messages"
    assert sent.headers["anthropic-beta"] == CALLER_BETAS
    assert body == CLAUDE_CODE_BODY  # the caller's blocks were sent, never changed in place
    assert "anthropic_content" in request.messages[0]  # nor the canonical transcript


def test_non_stream_call_omits_stream_and_the_loop_may_not_override_adapter_fields() -> None:
    body = {k: v for k, v in CLAUDE_CODE_BODY.items() if k != "stream"}
    request = canonical_of(body)
    assert request.native is not None
    request.native.fields["stream"] = True  # never in fields; the adapter decides stream (and model) alone
    request.native.fields["model"] = "claude-haiku-4-5"
    assert upstream(request, stream=False) == expected_body(body, SERVER_TOOL_NATIVE)


def test_string_contents_stay_strings_and_block_lists_stay_lists() -> None:
    body = {"max_tokens": 1024, "system": "Be brief.", "tools": [], "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": [{"type": "text", "text": "Bye"}]},
        {"role": "user", "content": [{"type": "text", "text": "(a second user message)"}]},
    ]}
    sent = upstream(canonical_of(body, server_tools=[]), stream=False)
    assert sent == {"model": MODEL, "max_tokens": 1024, "system": "Be brief.", "messages": body["messages"]}
    assert anthropic_request_problems(sent) == []


def test_several_leading_system_messages_join_as_blocks() -> None:
    request = canonical_of({"max_tokens": 10, "tools": [], "messages": [{"role": "user", "content": "Hi"}]},
                           server_tools=[])
    request.messages[:0] = [
        {"role": "system", "content": "Route policy.", "anthropic_content": "Route policy."},
        {"role": "system", "content": "Loop note."},  # no verbatim content: translated
        {"role": "system", "content": "Cached", "anthropic_content": [
            {"type": "text", "text": "Cached", "cache_control": {"type": "ephemeral"}}]},
    ]
    assert upstream(request)["system"] == [
        {"type": "text", "text": "Route policy."}, {"type": "text", "text": "Loop note."},
        {"type": "text", "text": "Cached", "cache_control": {"type": "ephemeral"}}]


def test_max_tokens_falls_back_to_the_provider_default() -> None:
    body = {"tools": [], "messages": [{"role": "user", "content": "Hi"}]}
    assert upstream(canonical_of(body, server_tools=[]))["max_tokens"] == 8192


def test_a_caller_tool_named_like_a_server_tool_is_sent_once_as_the_caller_wrote_it() -> None:
    mine = {"name": "fetch_url", "description": "The caller's own.", "input_schema": {"type": "object"},
            "cache_control": {"type": "ephemeral"}}
    body = {"max_tokens": 10, "tools": [mine], "messages": [{"role": "user", "content": "Hi"}]}
    assert upstream(canonical_of(body))["tools"] == [mine]


@pytest.mark.parametrize(("caller_choice", "engine_choice", "thinking", "expected"), [
    ({"type": "auto", "disable_parallel_tool_use": True}, None, None,
     {"type": "auto", "disable_parallel_tool_use": True}),
    ({"type": "tool", "name": "Read"}, None, None, {"type": "tool", "name": "Read"}),
    ({"type": "tool", "name": "Read"}, "auto", None, {"type": "auto"}),  # the engine's second iteration
    ({"type": "any"}, "none", None, {"type": "none"}),  # the finalize call
    ({"type": "any"}, None, {"type": "adaptive"}, {"type": "auto"}),  # forced + thinking: as for every caller
    ({"type": "any"}, None, {"type": "disabled"}, {"type": "any"}),
])
def test_tool_choice_is_the_engines_translated(caller_choice: dict[str, Any], engine_choice: Any,
                                               thinking: dict[str, Any] | None, expected: dict[str, Any]) -> None:
    body: dict[str, Any] = {"max_tokens": 2048, "tools": [CLAUDE_CODE_BODY["tools"][0]], "tool_choice": caller_choice,
                            "messages": [{"role": "user", "content": "Read it"}]}
    if thinking:
        body["thinking"] = thinking
    request = canonical_of(body)
    if engine_choice is not None:
        request.tool_choice = engine_choice
    assert upstream(request)["tool_choice"] == expected


def test_the_loops_own_turns_are_translated_and_join_the_callers() -> None:
    """A server tool round, then the finalize call: the loop's messages next to the caller's, verbatim."""
    request = canonical_of(CLAUDE_CODE_BODY)
    answer = [{"type": "thinking", "thinking": "Fetch the docs.", "signature": SIGNATURE},
              {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {"query": "pytest"}},
              {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": []},
              {"type": "tool_use", "id": "toolu_02Fetch", "name": "fetch_url", "input": {"url": "https://x.org"}}]
    turn = response_from_message({"id": "msg_2", "content": answer, "stop_reason": "tool_use"}).message
    request.messages += [turn, {"role": "tool", "tool_call_id": "toolu_02Fetch", "content": "<html>docs</html>"},
                         {"role": "user", "content": "Answer now without tools."}]
    request.tool_choice = "none"
    sent = upstream(request)
    assert sent["messages"][:-2] == CLAUDE_CODE_BODY["messages"]
    assert sent["messages"][-2:] == [
        {"role": "assistant", "content": answer},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_02Fetch",
                                      "content": "<html>docs</html>"},
                                     {"type": "text", "text": "Answer now without tools."}]}]
    assert sent["tool_choice"] == {"type": "none"} and sent["thinking"] == {"type": "adaptive"}


def test_a_user_message_after_tool_results_of_the_loop_keeps_the_callers_blocks() -> None:
    request = canonical_of({"max_tokens": 10, "tools": [], "messages": [{"role": "user", "content": "Hi"}]})
    request.messages += [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "fetch_url", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "page"},
        {"role": "user", "content": "More", "anthropic_content": "More"}]
    assert upstream(request)["messages"][-1] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "page"}, {"type": "text", "text": "More"}]}


def test_verbatim_blocks_whose_ids_no_longer_match_are_translated() -> None:
    """An id the translation sanitises: both the call and its result are translated, so the pair matches."""
    request = canonical_of({"max_tokens": 10, "tools": [], "messages": [{"role": "user", "content": "Hi"}]})
    call = {"id": "call:1", "type": "function", "function": {"name": "fetch_url", "arguments": '{"url": "u"}'}}
    request.messages += [
        {"role": "assistant", "content": "Fetching.", "tool_calls": [call], "anthropic_content": [
            {"type": "text", "text": "Fetching."},
            {"type": "tool_use", "id": "call:1", "name": "fetch_url", "input": {"url": "u"}}]},
        {"role": "tool", "tool_call_id": "call:1", "content": "page", "anthropic_content": [
            {"type": "tool_result", "tool_use_id": "call:1", "content": "page"}]}]
    sent = upstream(request)
    tool_use = sent["messages"][1]["content"][1]
    assert tool_use["id"].startswith("call_1_") and sent["messages"][2]["content"][0]["tool_use_id"] == tool_use["id"]
    assert anthropic_request_problems({k: v for k, v in sent.items() if k != "tools"}) == []


def test_a_mid_conversation_system_message_stays_in_place() -> None:
    sent = upstream(canonical_of(CLAUDE_CODE_BODY))
    assert sent["messages"][1] == {"role": "system", "content": "The user enabled auto-accept edits."}


# --- request: thinking fallback, betas --------------------------------------------------------------


def foreign_turn(body: dict[str, Any]) -> ModelRequest:
    """The current turn's tool call came from another provider: no thinking blocks.

    The last user message holds only the tool result (with text beside it a new turn would begin,
    where thinking needs no blocks from before).
    """
    body = {**body, "messages": [*body["messages"][:-1], {"role": "user", "content": [
        b for b in body["messages"][-1]["content"] if b["type"] == "tool_result"]}]}
    request = canonical_of(body)
    assistant = next(m for m in reversed(request.messages) if m["role"] == "assistant")
    assistant.pop("thinking_blocks")
    assistant["reasoning_content"] = "Read the test before touching anything."
    assistant["anthropic_content"] = [b for b in assistant["anthropic_content"] if b["type"] != "thinking"]
    return request


def test_foreign_history_drops_thinking_and_the_clear_thinking_edit() -> None:
    sent = upstream(foreign_turn(CLAUDE_CODE_BODY))
    assert "thinking" not in sent and "context_management" not in sent
    assert sent["output_config"] == {"effort": "high"}
    assert sent["messages"][2]["content"][0]["type"] == "text"  # the gateway-issued thinking is not replayed


def test_foreign_history_keeps_the_other_context_edits() -> None:
    body = copy.deepcopy(CLAUDE_CODE_BODY)
    body["context_management"]["edits"].append({"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses",
                                                                                            "value": 3}})
    body["context_management"]["future_option"] = True
    sent = upstream(foreign_turn(body))
    assert sent["context_management"] == {"edits": [body["context_management"]["edits"][1]], "future_option": True}
    assert body["context_management"]["edits"][0]["type"] == "clear_thinking_20251015"  # caller's copy untouched


def test_thinking_stays_when_the_current_turn_carries_its_blocks() -> None:
    sent = upstream(canonical_of(CLAUDE_CODE_BODY))
    assert sent["thinking"] == {"type": "adaptive"} and sent["context_management"] == CLAUDE_CODE_BODY[
        "context_management"]


def test_foreign_history_before_a_new_user_turn_keeps_thinking() -> None:
    """Text beside the tool results begins a new turn (as the strict fake's rule says): thinking stays."""
    request = canonical_of(CLAUDE_CODE_BODY)
    assistant = next(m for m in request.messages if m["role"] == "assistant")
    assistant.pop("thinking_blocks")
    assistant["anthropic_content"] = assistant["anthropic_content"][1:]
    assert upstream(request)["thinking"] == {"type": "adaptive"}


def test_caller_betas_join_the_providers_without_duplicates() -> None:
    provider = ProviderConfig(name="claude", type="anthropic", base_url="https://api.anthropic.com", api_key="k",
                              headers={"Anthropic-Beta": "interleaved-thinking-2025-05-14, fine-grained-tool-"
                                                         "streaming-2025-05-14", "x-team": "blue"})
    headers = ADAPTER.build_request(canonical_of(CLAUDE_CODE_BODY), provider, MODEL, True).headers
    assert headers["anthropic-beta"] == ("context-management-2025-06-27,interleaved-thinking-2025-05-14,"
                                         "fine-grained-tool-streaming-2025-05-14")
    assert [name for name in headers if name.lower() == "anthropic-beta"] == ["anthropic-beta"]
    assert (headers["x-team"], headers["x-api-key"]) == ("blue", "k")
    without = ADAPTER.build_request(canonical_of(CLAUDE_CODE_BODY, betas=None), provider, MODEL, True).headers
    assert without["Anthropic-Beta"] == provider.headers["Anthropic-Beta"] and "anthropic-beta" not in without


def test_other_wire_formats_native_requests_are_translated() -> None:
    request = canonical_of(CLAUDE_CODE_BODY)
    request.native = NativeRequest("openai", {"thinking": {"type": "adaptive"}})
    sent = upstream(request)
    assert "thinking" not in sent and sent["system"][0] == {"type": "text", "text": _text(
        CLAUDE_CODE_BODY["system"])}


# --- request without native: only an earlier Anthropic answer goes back verbatim ----------------------


def test_chat_path_sends_an_anthropic_answer_verbatim_and_translates_the_rest() -> None:
    answer = {"id": "msg_1", "stop_reason": "tool_use", "content": [
        {"type": "thinking", "thinking": "Look it up.", "signature": SIGNATURE},
        {"type": "text", "text": "Checking.", "citations": [{"type": "char_location", "cited_text": "x",
                                                               "document_index": 0, "start_char_index": 0,
                                                               "end_char_index": 1}]},
        {"type": "tool_use", "id": "toolu_1", "name": "fetch_url", "input": {"url": "https://x.org"}}]}
    turn = response_from_message(answer).message
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Check x.org", "anthropic_content": "ignored without native"}, turn,
                {"role": "tool", "tool_call_id": "toolu_1", "content": "page"}]
    request = ModelRequest(messages=messages, tools=[SERVER_TOOL], params={"reasoning_effort": "low"})
    sent = upstream(request, stream=False)
    assert sent["messages"] == [
        {"role": "user", "content": "Check x.org"},
        {"role": "assistant", "content": answer["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "page"}]}]
    assert sent["system"] == [{"type": "text", "text": "Be brief."}] and sent["thinking"] == {"type": "adaptive"}


def test_chat_path_translates_an_answer_whose_calls_changed() -> None:
    turn = response_from_message({"content": [
        {"type": "tool_use", "id": "toolu_1", "name": "a", "input": {}},
        {"type": "tool_use", "id": "toolu_2", "name": "b", "input": {}}]}).message
    turn["tool_calls"] = turn["tool_calls"][:1]  # a client that sent back one of the two calls
    request = ModelRequest(messages=[{"role": "user", "content": "Go"}, turn])
    assert upstream(request)["messages"][1] == {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "a", "input": {}}]}


# --- response: the native content kept, whole or streamed ---------------------------------------------

ANSWER: dict[str, Any] = {
    "id": "msg_01Answer", "type": "message", "role": "assistant", "model": "claude-opus-4-8",
    "content": [
        {"type": "thinking", "thinking": "Search first, then read.", "signature": SIGNATURE},
        {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {"query": "pytest rootdir"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": [
            {"type": "web_search_result", "url": "https://docs.pytest.org", "title": "pytest",
             "encrypted_content": "EqgfCioIARgBIiQ3", "page_age": None}]},
        {"type": "text", "text": "Pytest finds the rootdir ", "citations": [
            {"type": "web_search_result_location", "url": "https://docs.pytest.org", "title": "pytest",
             "encrypted_index": "Eo8BCioIAhgB", "cited_text": "rootdir is determined"}]},
        {"type": "text", "text": "from the ini file."},
        {"type": "tool_use", "id": "toolu_01Edit", "name": "Edit",
         "input": {"file_path": "/repo/pytest.ini", "old_string": "", "new_string": "[pytest]"}},
    ],
    "stop_reason": "tool_use", "stop_sequence": None,
    "usage": {"input_tokens": 1200, "cache_read_input_tokens": 9000, "output_tokens": 230},
}


def sse(data: dict[str, Any]) -> SSEEvent:
    return SSEEvent(str(data["type"]), orjson.dumps(data))


def stream_of(message: dict[str, Any]) -> list[SSEEvent]:
    """The SSE events Anthropic sends for ``message``: each block opened empty, then its deltas."""
    head = {k: v for k, v in message.items() if k not in ("content", "stop_reason", "stop_sequence", "usage")}
    events = [sse({"type": "message_start", "message": {**head, "content": [], "stop_reason": None,
                                                        "usage": {"input_tokens": 1200, "output_tokens": 1}}})]
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        deltas: list[dict[str, Any]] = []
        if kind == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            text = block["text"]
            deltas = [{"type": "text_delta", "text": text[:5]}, {"type": "text_delta", "text": text[5:]}]
            deltas += [{"type": "citations_delta", "citation": c} for c in block.get("citations", ())]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": block["thinking"]},
                      {"type": "signature_delta", "signature": block["signature"]}]
        elif "input" in block:
            start = {**block, "input": {}}
            raw = block["input"] if isinstance(block["input"], str) else orjson.dumps(block["input"]).decode()
            deltas = [{"type": "input_json_delta", "partial_json": raw[:7]},
                      {"type": "input_json_delta", "partial_json": raw[7:]}]
        else:
            start = block
        events.append(sse({"type": "content_block_start", "index": index, "content_block": start}))
        events += [sse({"type": "content_block_delta", "index": index, "delta": d}) for d in deltas]
        events.append(sse({"type": "content_block_stop", "index": index}))
    events += [sse({"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                    "usage": message["usage"]}),
               sse({"type": "message_stop"})]
    return events


def test_response_keeps_the_native_content_next_to_the_canonical_turn() -> None:
    response = ADAPTER.parse_response(orjson.dumps(ANSWER))
    message = response.message
    assert message["anthropic_content"] == ANSWER["content"]
    assert message["content"] == "Pytest finds the rootdir from the ini file."
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["Edit"]
    assert message["thinking_blocks"] == [ANSWER["content"][0]]
    assert message["reasoning_content"] == "Search first, then read."


def test_stream_rebuilds_the_same_native_content_as_the_whole_body() -> None:
    whole = ADAPTER.parse_response(orjson.dumps(ANSWER))
    streamed, _ = parse_stream(ADAPTER, stream_of(ANSWER))
    assert streamed.message["anthropic_content"] == ANSWER["content"]
    assert streamed == whole
    data = b"".join(b"event: %s\ndata: %s\n\n" % (e.event.encode(), e.data) for e in stream_of(ANSWER))
    in_pieces, _ = parse_in_pieces(ADAPTER, data, [0, 100, 101, 777, len(data) // 2, len(data)])
    assert in_pieces == whole


@pytest.mark.parametrize("content", [
    [{"type": "text", "text": "Cut"}, {"type": "tool_use", "id": "toolu_1", "name": "Edit", "input": '{"file_pa'}],
    [{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": '{"que'}],
    [{"type": "tool_use", "id": "toolu_1", "name": "Edit"}],
    [],
])
def test_no_native_content_when_it_could_not_go_back(content: list[dict[str, Any]]) -> None:
    response = response_from_message({"content": content, "stop_reason": "max_tokens"})
    assert "anthropic_content" not in response.message


def test_a_streamed_input_cut_off_keeps_the_translation() -> None:
    cut = {**ANSWER, "stop_reason": "max_tokens", "content": [
        {"type": "text", "text": "Editing now."},
        {"type": "tool_use", "id": "toolu_01Edit", "name": "Edit", "input": '{"file_path": "/repo/pyt'}]}
    response, _ = parse_stream(ADAPTER, stream_of(cut))
    assert "anthropic_content" not in response.message
    assert response.finish_reason == "length"
    request = ModelRequest(messages=[{"role": "user", "content": "Go"}, response.message,
                                     {"role": "tool", "tool_call_id": "toolu_01Edit", "content": "cut off"}])
    assert upstream(request)["messages"][1]["content"][-1]["input"] == {}


# --- count_tokens ------------------------------------------------------------------------------------


def test_count_tokens_sends_the_same_body_minus_what_the_endpoint_does_not_take() -> None:
    request = canonical_of(CLAUDE_CODE_BODY)
    counted = ADAPTER.build_count_tokens(request, PROVIDER, MODEL)
    assert counted.url == "https://api.anthropic.com/v1/messages/count_tokens"
    assert counted.headers["anthropic-beta"] == CALLER_BETAS and counted.headers["x-api-key"] == "sk-test"
    full = expected_body(CLAUDE_CODE_BODY, SERVER_TOOL_NATIVE)
    dropped = {"max_tokens", "stream", "metadata", "temperature"}
    assert orjson.loads(counted.body) == {k: v for k, v in full.items() if k not in dropped}


def test_count_tokens_applies_the_same_thinking_fallback_and_drops_every_create_only_field() -> None:
    body = {**CLAUDE_CODE_BODY, "top_p": 0.9, "top_k": 5, "stop_sequences": ["END"], "service_tier": "auto",
            "container": "container_1", "inference_geo": "us"}
    sent = orjson.loads(ADAPTER.build_count_tokens(foreign_turn(body), PROVIDER, MODEL).body)
    assert set(sent) == {"model", "system", "messages", "tools", "tool_choice", "output_config",
                         "speculative_beta_field"}


def test_count_tokens_for_a_chat_shaped_request_and_a_v1_base_url() -> None:
    provider = ProviderConfig(name="proxy", type="anthropic", base_url="https://llm.example/anthropic/v1")
    request = ModelRequest(messages=[{"role": "user", "content": "Hi"}], params={"max_tokens": 50, "temperature": 0.2,
                                                                                 "user": "u1"})
    counted = ADAPTER.build_count_tokens(request, provider, MODEL)
    assert counted.url == "https://llm.example/anthropic/v1/messages/count_tokens"
    assert orjson.loads(counted.body) == {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}


def test_parse_count_tokens() -> None:
    assert ADAPTER.parse_count_tokens(b'{"input_tokens": 14250}') == 14250
    assert ADAPTER.parse_count_tokens(b'{"input_tokens": 0, "context_management": {}}') == 0


@pytest.mark.parametrize("body", [b"not json", b"[]", b"{}", b'{"input_tokens": "12"}', b'{"input_tokens": -1}',
                                  b'{"input_tokens": true}', b'{"input_tokens": 1.5}', b'{"input_tokens": 1e300}'])
def test_parse_count_tokens_refuses_other_documents(body: bytes) -> None:
    with pytest.raises(ProviderError) as info:
        ADAPTER.parse_count_tokens(body)
    assert info.value.error_class is ErrorClass.INVALID_RESPONSE


def test_count_tokens_errors() -> None:
    with pytest.raises(ProviderError) as info:
        ADAPTER.parse_count_tokens(b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}')
    assert info.value.error_class is ErrorClass.OVERLOADED
    error = ADAPTER.parse_error(400, {}, b'{"type": "error", "error": {"type": "invalid_request_error", '
                                         b'"message": "messages: Field required"}}')
    assert (error.error_class, error.message) == (ErrorClass.BAD_REQUEST, "messages: Field required")


# --- other wire formats never send the artifact -------------------------------------------------------


def transcript_with_artifact() -> list[Message]:
    turn = response_from_message(ANSWER).message
    return [{"role": "system", "content": "Be brief.", "anthropic_content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": "Fix it", "anthropic_content": "Fix it"}, turn,
            {"role": "tool", "tool_call_id": "toolu_01Edit", "content": "done",
             "anthropic_content": [{"type": "tool_result", "tool_use_id": "toolu_01Edit", "content": "done"}]}]


def test_openai_never_sends_anthropic_content() -> None:
    provider = ProviderConfig(name="openai", type="openai", base_url="https://api.openai.com/v1", api_key="k")
    request = ModelRequest(messages=transcript_with_artifact(), native=canonical_of(CLAUDE_CODE_BODY).native)
    sent = OpenAIAdapter().build_request(request, provider, "gpt-5", stream=False).body
    assert b"anthropic_content" not in sent and b"srvtoolu_01" not in sent and b"speculative_beta_field" not in sent
    assert [m["role"] for m in orjson.loads(sent)["messages"]] == ["system", "user", "assistant", "tool"]


def test_gemini_never_sends_anthropic_content() -> None:
    provider = ProviderConfig(name="google", type="gemini", base_url="https://generativelanguage.googleapis.com",
                              api_key="k")
    request = ModelRequest(messages=transcript_with_artifact(), native=canonical_of(CLAUDE_CODE_BODY).native)
    sent = GeminiAdapter().build_request(request, provider, "gemini-3-flash-preview", stream=False).body
    assert b"anthropic_content" not in sent and b"srvtoolu_01" not in sent and b"speculative_beta_field" not in sent
    assert b"cache_control" not in sent and b"Pytest finds the rootdir" in sent
