"""Resume way A: which trailing tool results a plain follow-up carries, and whether its paused turn is the stored one.

A follow-up names a continuation only through the ids of its trailing tool results; an id alone is not
trusted (upstreams reuse ids such as ``call_0`` across conversations), so the paused assistant turn the
client sent back must hold exactly the stored pending calls.
"""

from __future__ import annotations

from gateway.canonical import Message, text_of
from gateway.errors import quoted
from gateway.loop.same_arguments import same_arguments
from gateway.store.continuations.base import Continuation

# Way A looks up at most this many trailing tool-call ids in the store (all in one lookup): a paused turn's
# results come last, and a follow-up with thousands of tool messages must not send thousands of keys.
MAX_WAY_A_LOOKUPS = 32


def may_resume_way_a(messages: list[Message]) -> bool:
    """Only trailing tool results can answer a paused turn: anything else needs no store lookup."""
    return messages[-1].get("role") == "tool"


def trailing_outputs(messages: list[Message]) -> dict[str, str]:
    """The trailing tool messages' outputs by call id, the last message first (a paused turn's results come last)."""
    trailing: dict[str, str] = {}
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        content = message.get("content")
        trailing[message["tool_call_id"]] = content if isinstance(content, str) else text_of(content)
    return trailing


def history_mismatch(continuation: Continuation, messages: list[Message]) -> str | None:
    """Why the client's paused assistant turn is not the stored one; None when it holds exactly its pending calls.

    Guards way A against servers that reuse tool-call ids (``call_0``) across conversations:
    an id alone must not pull another conversation's continuation into this one. Arguments
    are compared as JSON values, not bytes: clients re-serialise the message they send back.
    """
    index = len(messages) - 1
    while index >= 0 and messages[index].get("role") == "tool":
        index -= 1
    if index < 0 or messages[index].get("role") != "assistant":
        return "no assistant message before the tool messages"
    sent = {c.get("id"): c.get("function") for c in messages[index].get("tool_calls") or ()
            if isinstance(c, dict)}
    for item in continuation.pending:
        call_id = item["tool_call_id"]
        function = sent.get(call_id)
        if not isinstance(function, dict):
            return f"the assistant message has no tool call {quoted(call_id)}"
        if function.get("name") != item["name"]:
            return f"tool call {quoted(call_id)} names {quoted(function.get('name'))}, not {quoted(item['name'])}"
        if not same_arguments(function.get("arguments"), item["arguments"]):
            return f"tool call {quoted(call_id)} has other arguments: {quoted(function.get('arguments'))}"
    return None
