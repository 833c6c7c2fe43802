"""The message rules a strict OpenAI server enforces (independent of the gateway's own checker)."""

from __future__ import annotations

from typing import Any

import orjson

_FOREIGN = ("thinking_blocks", "extra_content", "reasoning_origin")


def _json_object(text: str) -> bool:
    try:
        return isinstance(orjson.loads(text), dict)
    except orjson.JSONDecodeError:
        return False


def openai_request_problems(body: dict[str, Any], model: str = "") -> list[str]:
    problems: list[str] = []
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return ["messages must be a non-empty array"]
    waiting: set[str] = set()
    for index, message in enumerate(messages):
        for key in _FOREIGN:
            if key in message:
                problems.append(f"messages[{index}]: unknown field {key}")
        for call in message.get("tool_calls") or ():
            if "extra_content" in call:
                problems.append(f"messages[{index}]: unknown field tool_calls[].extra_content")
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in waiting:
                problems.append(f"messages[{index}]: messages with role 'tool' must be a response to a preceeding "
                                "message with 'tool_calls'.")
            waiting.discard(call_id)
            continue
        if waiting:
            problems.append("An assistant message with 'tool_calls' must be followed by tool messages responding "
                            f"to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                            f"{', '.join(sorted(waiting))}")
            waiting = set()
        if role == "assistant":
            for call in message.get("tool_calls") or ():
                if call.get("type") == "custom":  # a custom (freeform) tool's call: its input is free text
                    custom = call.get("custom")
                    if "function" in call or not isinstance(custom, dict) or not isinstance(custom.get("input"), str):
                        problems.append(f"messages[{index}]: a custom tool call needs custom.name and custom.input")
                    waiting.add(call.get("id"))
                    continue
                if call.get("type", "function") != "function":
                    problems.append(f"messages[{index}]: tool call type {call.get('type')!r} is not supported")
                arguments = call.get("function", {}).get("arguments")
                if not isinstance(arguments, str):
                    problems.append(f"messages[{index}]: tool call arguments must be a string")
                elif not _json_object(arguments):
                    # vLLM, SGLang and other compat servers parse them for the chat template: 400.
                    problems.append(f"messages[{index}]: tool call arguments are not a valid JSON object")
                waiting.add(call.get("id"))
    if waiting:
        problems.append(f"tool_call_ids without response messages: {', '.join(sorted(waiting))}")
    _check_tools(body, problems)
    return problems


def _check_tools(body: dict[str, Any], problems: list[str]) -> None:
    """Tools are function tools, or (OpenAI's own GPT-5 family) custom ones; never a gateway's marker key."""
    for index, tool in enumerate(body.get("tools") or ()):
        kind = tool.get("type")
        if kind not in ("function", "custom") or set(tool) != {"type", kind}:
            problems.append(f"tools[{index}]: a tool is {{type: 'function', function}} or {{type: 'custom', custom}}")
