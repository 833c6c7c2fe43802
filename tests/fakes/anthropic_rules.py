"""The request rules a strict Anthropic Messages server enforces, as a pure function.

A fake Anthropic server answers 400 with these messages; the adapter tests run every body they
build through it. The rules are the ones the real API applies (or is documented to apply) and that
a translator can get wrong: required ``max_tokens``, user/assistant roles (system only right after a
user turn), ``tool_use`` /
``tool_result`` pairing and placement, the id pattern, blank text, the thinking pass-back rule and
the parameters thinking forbids, unknown fields (the real server answers "Extra inputs are not
permitted"), and no artifacts of the OpenAI-shaped transcript leaking through. Error texts follow
the real ones where they are known.

Deliberately stricter than the real API in one place: consecutive same-role messages are checked
as sent, not merged first, so a translator that splits tool results across messages is caught.
"""

from __future__ import annotations

import re
from typing import Any

_TOP_LEVEL = {"model", "messages", "max_tokens", "system", "tools", "tool_choice", "thinking", "output_config",
              "stop_sequences", "temperature", "top_p", "top_k", "metadata", "stream", "service_tier",
              "container", "context_management", "mcp_servers"}
_BLOCK_KEYS = {
    "text": {"type", "text", "cache_control", "citations"},
    "image": {"type", "source", "cache_control"},
    "document": {"type", "source", "title", "context", "citations", "cache_control"},
    "tool_use": {"type", "id", "name", "input", "cache_control"},
    "tool_result": {"type", "tool_use_id", "content", "is_error", "cache_control"},
    "thinking": {"type", "thinking", "signature"},
    "redacted_thinking": {"type", "data"},
}
_USER_BLOCKS = {"text", "image", "document", "tool_result"}
_ASSISTANT_BLOCKS = {"text", "tool_use", "thinking", "redacted_thinking"}
_RESULT_BLOCKS = {"text", "image", "document", "search_result"}
_TOOL_KEYS = {"name", "description", "input_schema", "strict", "cache_control", "input_examples", "type",
              "defer_loading", "eager_input_streaming"}
_CHOICES = {"auto", "any", "tool", "none"}
_THINKING = ("thinking", "redacted_thinking")
_FOREIGN = {"reasoning_content", "reasoning_origin", "thinking_blocks", "extra_content", "tool_calls",
            "tool_call_id", "image_url", "function", "parameters", "response_format", "reasoning_effort",
            "stream_options"}
# Values that are free-form JSON (tool input, JSON Schema): their keys are user data, not fields.
_OPAQUE = {"input", "input_schema", "schema"}
_ID = re.compile(r"[a-zA-Z0-9_-]+")
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")


def _foreign_keys(value: Any, path: str, problems: list[str]) -> None:
    if isinstance(value, dict):
        for key, sub in value.items():
            if key in _FOREIGN:
                problems.append(f"{path}.{key}: Extra inputs are not permitted (OpenAI transcript artifact)")
            if key not in _OPAQUE:
                _foreign_keys(sub, f"{path}.{key}", problems)
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            _foreign_keys(sub, f"{path}[{index}]", problems)


def _blocks(message: dict[str, Any]) -> list[Any]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def _of_type(message: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [b for b in _blocks(message) if isinstance(b, dict) and b.get("type") == kind]


def _check_text(text: Any, path: str, problems: list[str]) -> None:
    if not isinstance(text, str) or not text.strip():
        problems.append(f"{path}: text content blocks must contain non-whitespace text")


def _check_block(block: Any, role: str, path: str, problems: list[str]) -> None:
    if not isinstance(block, dict) or block.get("type") not in _BLOCK_KEYS:
        kind = block.get("type") if isinstance(block, dict) else type(block).__name__
        problems.append(f"{path}.type: unknown content block type '{kind}'")
        return
    kind = block["type"]
    for key in block.keys() - _BLOCK_KEYS[kind]:
        problems.append(f"{path}.{key}: Extra inputs are not permitted")
    if kind not in (_USER_BLOCKS if role == "user" else _ASSISTANT_BLOCKS):
        problems.append(f"{path}: `{kind}` blocks are not allowed in {role} messages")
    if kind == "text":
        _check_text(block.get("text"), f"{path}.text", problems)
    elif kind == "tool_use":
        if not isinstance(block.get("id"), str) or not _ID.fullmatch(block["id"]):
            problems.append(f"{path}.id: String should match pattern '^[a-zA-Z0-9_-]+$'")
        if not isinstance(block.get("name"), str) or not block["name"]:
            problems.append(f"{path}.name: Field required")
        if not isinstance(block.get("input"), dict):
            problems.append(f"{path}.input: Input should be a valid dictionary")
    elif kind == "tool_result":
        if not isinstance(block.get("tool_use_id"), str) or not _ID.fullmatch(block["tool_use_id"]):
            problems.append(f"{path}.tool_use_id: String should match pattern '^[a-zA-Z0-9_-]+$'")
        content = block.get("content")
        if isinstance(content, list):
            for index, sub in enumerate(content):
                sub_kind = sub.get("type") if isinstance(sub, dict) else None
                if sub_kind not in _RESULT_BLOCKS:
                    problems.append(f"{path}.content.{index}.type: '{sub_kind}' is not allowed in tool_result")
                elif sub_kind == "text":
                    _check_text(sub.get("text"), f"{path}.content.{index}.text", problems)
        elif content is not None and not isinstance(content, str):
            problems.append(f"{path}.content: Input should be a valid string or list")
    elif kind == "thinking" and not (isinstance(block.get("thinking"), str) and block.get("signature")):
        problems.append(f"{path}: thinking blocks need their thinking text and signature")
    elif kind == "redacted_thinking" and not block.get("data"):
        problems.append(f"{path}.data: Field required")


def _check_messages(messages: list[Any], problems: list[str]) -> None:
    seen_ids: set[str] = set()
    for i, message in enumerate(messages):
        path = f"messages.{i}"
        if not isinstance(message, dict):
            problems.append(f"{path}: Input should be a valid dictionary")
            continue
        for key in message.keys() - {"role", "content"}:
            problems.append(f"{path}.{key}: Extra inputs are not permitted")
        role = message.get("role")
        if role == "system":  # accepted since Claude Opus 4.8, right after a user turn, text only
            previous = messages[i - 1] if i else None
            if not isinstance(previous, dict) or previous.get("role") != "user":
                problems.append(f"{path}.role: a system message must come immediately after a user message")
            content = message.get("content")
            if not (isinstance(content, str) and content.strip()) and not (
                    isinstance(content, list) and content
                    and all(isinstance(b, dict) and b.get("type") == "text" for b in content)):
                problems.append(f"{path}.content: a system message holds non-empty text")
            continue
        if role not in ("user", "assistant"):
            problems.append(f"{path}.role: Input should be 'user' or 'assistant'")
            continue
        content = message.get("content")
        final_assistant = role == "assistant" and i == len(messages) - 1
        if isinstance(content, str):
            if not content.strip() and not final_assistant:
                problems.append(f"{path}: all messages must have non-empty content except for the optional "
                                "final assistant message")
        elif isinstance(content, list):
            if not content and not final_assistant:
                problems.append(f"{path}: all messages must have non-empty content except for the optional "
                                "final assistant message")
            for j, block in enumerate(content):
                _check_block(block, role, f"{path}.content.{j}", problems)
        else:
            problems.append(f"{path}.content: Input should be a valid string or list")
        for block in _of_type(message, "tool_use"):
            if block.get("id") in seen_ids:
                problems.append(f"{path}: `tool_use` ids must be unique: {block.get('id')}")
            seen_ids.add(str(block.get("id")))


def _check_pairing(messages: list[Any], problems: list[str]) -> None:
    """Every tool_use answered at the start of the very next user message; no stray tool_result."""
    previous_ids: list[str] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            previous_ids = []
            continue
        results = _of_type(message, "tool_result") if message.get("role") == "user" else []
        unexpected = [str(r.get("tool_use_id")) for r in results if r.get("tool_use_id") not in previous_ids]
        if unexpected:
            problems.append(f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                            f"{', '.join(unexpected)}. Each `tool_result` block must have a corresponding "
                            "`tool_use` block in the previous message.")
        if previous_ids:
            answered = {str(r.get("tool_use_id")) for r in results}
            missing = [tid for tid in previous_ids if tid not in answered]
            if message.get("role") != "user" or missing:
                problems.append(f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks "
                                f"immediately after: {', '.join(missing or previous_ids)}. Each `tool_use` "
                                "block must have a corresponding `tool_result` block in the next message.")
            else:
                leading = 0
                for block in _blocks(message):
                    if not (isinstance(block, dict) and block.get("type") == "tool_result"):
                        break
                    leading += 1
                if leading < len(previous_ids):
                    problems.append(f"messages.{i}: Did not find {len(previous_ids)} `tool_result` block(s) at "
                                    "the beginning of this message. Messages following `tool_use` blocks must "
                                    "begin with a matching number of `tool_result` blocks.")
        previous_ids = ([str(b.get("id")) for b in _of_type(message, "tool_use")]
                        if message.get("role") == "assistant" else [])
    if previous_ids:
        problems.append(f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` blocks "
                        f"immediately after: {', '.join(previous_ids)}.")


def _check_thinking(body: dict[str, Any], messages: list[Any], problems: list[str]) -> None:
    thinking = body.get("thinking")
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if thinking is not None and kind not in ("enabled", "adaptive", "disabled"):
        problems.append("thinking.type: Input tag does not match 'enabled', 'adaptive' or 'disabled'")
    if kind not in ("enabled", "adaptive"):
        return
    assert isinstance(thinking, dict)
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024:
            problems.append("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
        elif isinstance(body.get("max_tokens"), int) and budget >= body["max_tokens"]:
            problems.append("`max_tokens` must be greater than `thinking.budget_tokens`")
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        problems.append("Thinking may not be enabled when tool_choice forces tool use.")
    if "temperature" in body and body["temperature"] != 1:
        problems.append("`temperature` may only be set to 1 when thinking is enabled")
    if "top_k" in body:
        problems.append("`top_k` may not be set when thinking is enabled")
    if isinstance(body.get("top_p"), int | float) and body["top_p"] < 0.95:
        problems.append("`top_p` must be between 0.95 and 1 when thinking is enabled")
    # The current turn starts after the last user message that is not only tool results.
    start = 0
    for i, message in enumerate(messages):
        if isinstance(message, dict) and message.get("role") == "user" and (
                isinstance(message.get("content"), str)
                or any(isinstance(b, dict) and b.get("type") != "tool_result" for b in _blocks(message))):
            start = i + 1
    for i in range(start, len(messages)):
        message = messages[i]
        if not isinstance(message, dict) or message.get("role") != "assistant" or not _of_type(message, "tool_use"):
            continue
        first = _blocks(message)[0] if _blocks(message) else None
        first_type = first.get("type") if isinstance(first, dict) else None
        if first_type not in _THINKING:
            problems.append(f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
                            f"`{first_type}`. When `thinking` is enabled, a final `assistant` message must start "
                            "with a thinking block.")


def _check_tools(body: dict[str, Any], problems: list[str]) -> None:
    tools = body.get("tools")
    names: list[str] = []
    if tools is not None and not isinstance(tools, list):
        problems.append("tools: Input should be a valid list")
        tools = []
    for i, tool in enumerate(tools or ()):
        if not isinstance(tool, dict):
            problems.append(f"tools.{i}: Input should be a valid dictionary")
            continue
        for key in tool.keys() - _TOOL_KEYS if tool.get("type") in (None, "custom") else ():
            problems.append(f"tools.{i}.{key}: Extra inputs are not permitted")
        name = tool.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            problems.append(f"tools.{i}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'")
        elif name in names:
            problems.append(f"tools: Tool names must be unique: {name}")
        names.append(str(name))
        if tool.get("type") not in (None, "custom"):
            continue  # a typed tool (web_search_*, bash_*): Anthropic defines it, its keys are its own
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            problems.append(f"tools.{i}.input_schema.type: Input should be 'object'")
        elif any(key in schema for key in ("oneOf", "anyOf", "allOf")):
            problems.append(f"tools.{i}.input_schema: input_schema does not support oneOf, allOf, or anyOf at "
                            "the top level")
    choice = body.get("tool_choice")
    if choice is None:
        return
    if not isinstance(choice, dict) or choice.get("type") not in _CHOICES:
        problems.append("tool_choice: Input tag does not match 'auto', 'any', 'tool' or 'none'")
        return
    if not names:
        problems.append("tool_choice: may only be specified while providing tools")
    if choice["type"] == "tool" and choice.get("name") not in names:
        problems.append(f"tool_choice.name: tool '{choice.get('name')}' is not among the tools")
    allowed = {"type", "disable_parallel_tool_use"} | ({"name"} if choice["type"] == "tool" else set())
    if choice["type"] == "none":
        allowed = {"type"}
    for key in choice.keys() - allowed:
        problems.append(f"tool_choice.{choice['type']}.{key}: Extra inputs are not permitted")


def _check_sampling(body: dict[str, Any], problems: list[str]) -> None:
    for name in ("temperature", "top_p"):
        value = body.get(name)
        if value is not None and (not isinstance(value, int | float) or not 0 <= value <= 1):
            problems.append(f"{name}: Input should be between 0 and 1")
    if "temperature" in body and "top_p" in body:
        problems.append("`temperature` and `top_p` cannot both be specified for this model. Please use only one.")
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list):
            problems.append("stop_sequences: Input should be a valid list")
        elif any(not isinstance(s, str) or not s.strip() for s in stops):
            problems.append("stop_sequences: each stop sequence must contain non-whitespace")
    metadata = body.get("metadata")
    if metadata is not None and (not isinstance(metadata, dict) or metadata.keys() - {"user_id"}):
        problems.append("metadata: only user_id is permitted")
    output = body.get("output_config")
    if output is not None:
        if not isinstance(output, dict) or output.keys() - {"effort", "format"}:
            problems.append("output_config: Extra inputs are not permitted")
        elif "format" in output and not (isinstance(output["format"], dict)
                                         and output["format"].get("type") == "json_schema"
                                         and isinstance(output["format"].get("schema"), dict)):
            problems.append("output_config.format: expected {type: json_schema, schema: {...}}")


def anthropic_request_problems(body: dict[str, Any]) -> list[str]:
    """Everything a strict Anthropic server would reject in ``body``; empty when it would accept it."""
    if not isinstance(body, dict):
        return ["body: Input should be a valid dictionary"]
    problems: list[str] = []
    for key in body.keys() - _TOP_LEVEL:
        problems.append(f"{key}: Extra inputs are not permitted")
    if not isinstance(body.get("model"), str) or not body["model"]:
        problems.append("model: Field required")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        problems.append("max_tokens: Field required (a positive integer)")
    system = body.get("system")
    if isinstance(system, list):
        for i, block in enumerate(system):
            if not isinstance(block, dict) or block.get("type") != "text":
                problems.append(f"system.{i}.type: Input should be 'text'")
            else:
                _check_text(block.get("text"), f"system.{i}.text", problems)
    elif system is not None and not isinstance(system, str):
        problems.append("system: Input should be a valid string or list of text blocks")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        problems.append("messages: Field required (at least one message)")
        messages = []
    _check_messages(messages, problems)
    _check_pairing(messages, problems)
    _check_thinking(body, messages, problems)
    _check_tools(body, problems)
    _check_sampling(body, problems)
    _foreign_keys(body, "body", problems)
    return problems
