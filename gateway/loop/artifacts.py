"""Provider artifacts kept for clients that cannot carry them.

An OpenAI client drops what it does not know: Gemini thought signatures, Anthropic thinking
blocks, DeepSeek reasoning. When a turn with tool calls goes back to the client (a pause),
its artifacts are stored keyed by ``tool_call_id``; when the client later sends that
history back without them, they are re-attached, so a client-driven tool loop through the
gateway keeps working on Gemini 3, Claude with thinking, or DeepSeek's reasoner.
"""

from __future__ import annotations

from typing import Any

from gateway.canonical import ARTIFACT_MESSAGE_KEYS, Message
from gateway.store.base import Store


def artifacts_of(assistant: Message) -> dict[str, dict[str, Any]]:
    """The artifacts of one assistant turn, per tool call id (empty when it has none)."""
    message_level = {key: assistant[key] for key in ARTIFACT_MESSAGE_KEYS if key in assistant}
    items: dict[str, dict[str, Any]] = {}
    for call in assistant.get("tool_calls") or ():
        item: dict[str, Any] = {}
        if message_level:
            item["message"] = message_level
        if "extra_content" in call:
            item["call"] = call["extra_content"]
        if item:
            items[call["id"]] = item
    return items


def _bare_calls(messages: list[Message]) -> list[tuple[Message, dict[str, Any]]]:
    found: list[tuple[Message, dict[str, Any]]] = []
    for message in messages:
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        if any(key in message for key in ARTIFACT_MESSAGE_KEYS):
            continue
        found.extend((message, call) for call in message["tool_calls"] if "extra_content" not in call)
    return found


async def reattach(store: Store, tenant: str, messages: list[Message]) -> int:
    """Put stored artifacts back on the client's history, in place; returns how many calls got some."""
    bare = _bare_calls(messages)
    if not bare:
        return 0
    stored = await store.get_artifacts(tenant, [call["id"] for _, call in bare])
    for message, call in bare:
        item = stored.get(call["id"])
        if not item:
            continue
        if "call" in item:
            call["extra_content"] = item["call"]
        for key, value in item.get("message", {}).items():
            message.setdefault(key, value)
    return sum(1 for _, call in bare if call["id"] in stored)
