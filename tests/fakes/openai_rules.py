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
                arguments = call.get("function", {}).get("arguments")
                if not isinstance(arguments, str):
                    problems.append(f"messages[{index}]: tool call arguments must be a string")
                elif not _json_object(arguments):
                    # vLLM, SGLang and other compat servers parse them for the chat template: 400.
                    problems.append(f"messages[{index}]: tool call arguments are not a valid JSON object")
                waiting.add(call.get("id"))
    if waiting:
        problems.append(f"tool_call_ids without response messages: {', '.join(sorted(waiting))}")
    return problems
