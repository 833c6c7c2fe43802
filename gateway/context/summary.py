"""The summary message the guard puts in place of compressed history, and the summariser's prompt.

Design: the summary is an ordinary ``user`` message whose content starts with ``SUMMARY_PREFIX``.

* Why ``user``: it is the one role every upstream accepts at any position. A ``system`` message
  would be hoisted into Anthropic's top-level ``system`` and Gemini's ``systemInstruction``, giving
  text distilled from tool results (untrusted data) the authority of the operator's instructions,
  and several OpenAI-compatible servers (vLLM chat templates) reject a system message after the
  first. An invented ``assistant`` message would put words in the model's mouth. The summary is
  followed by the latest user message, so two user messages are adjacent: OpenAI accepts that,
  the Anthropic adapter merges adjacent user messages into one, and Gemini accepts consecutive
  user contents. It also keeps Anthropic's "first message is user" rule true.
* Why a content prefix and not a marker key: a key such as ``loopgate_summary`` would reach
  upstreams that reject unknown message fields unless every adapter stripped it; the prefix is
  plain content, needs no adapter change, survives the continuation store as is, and lets a
  resumed loop recognise its own summary so it is kept in the head, never summarised again.
  A client that sends the same prefix only gets its message treated as part of the head.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from gateway.canonical import Message, text_of

SUMMARY_PREFIX = "[Summary of the earlier conversation, written by the gateway to fit the context window]\n"

SUMMARY_INSTRUCTION = (
    "Below is the earlier part of a conversation between a user and an AI assistant that uses tools. "
    "It will be removed from the assistant's context and replaced by your summary, so the assistant must be "
    "able to continue the task from the summary alone. Summarise it concisely, keeping: the user's goals, "
    "requests and constraints; facts established; decisions made and why; every tool call that matters with "
    "the key values of its result (numbers, names, identifiers, paths, URLs, errors); and what is still open. "
    "Do not invent anything and do not answer the user. Reply with the summary only."
)


def is_summary(message: Message) -> bool:
    """Whether ``message`` is a summary the guard wrote (a ``user`` message starting with the prefix)."""
    if message.get("role") != "user":
        return False
    content = message.get("content")
    return isinstance(content, str) and content.startswith(SUMMARY_PREFIX)


def summary_message(text: str) -> Message:
    """The message that replaces compressed history."""
    return {"role": "user", "content": SUMMARY_PREFIX + text.strip()}


def summary_body(message: Message) -> str:
    """The summary text of a summary message, without the prefix."""
    return str(message.get("content") or "")[len(SUMMARY_PREFIX):]


def _clip(text: str, limit: int) -> str:
    if limit <= 0 or len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters omitted ...]\n{text[-half:]}"


def _content_text(content: Any) -> str:
    text = text_of(content)
    if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") not in (
            "text", "input_text", "output_text") for p in content):
        text = f"{text} [non-text attachment]".strip()
    return text


def _render(message: Message, names: dict[str, str], limit: int) -> list[str]:
    role = str(message.get("role") or "unknown")
    if is_summary(message):
        return [f"[earlier summary]\n{_clip(summary_body(message), limit)}"]
    if role == "tool":
        call_id = str(message.get("tool_call_id") or "")
        name = names.get(call_id, "tool")
        return [f"[tool result of {name} ({call_id})]\n{_clip(_content_text(message.get('content')), limit)}"]
    lines: list[str] = []
    text = _content_text(message.get("content"))
    if text:
        lines.append(f"[{role}]\n{_clip(text, limit)}")
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        name = str(function.get("name") or "")
        names[str(call.get("id") or "")] = name
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = orjson.dumps(arguments).decode()
        lines.append(f"[{role} called {name} ({call.get('id')})] {_clip(arguments, limit)}")
    return lines


def render_transcript(old: Sequence[Message], max_chars_per_message: int = 20_000) -> str:
    """``old`` as plain text: one block per message, tool calls and results named, long items clipped."""
    names: dict[str, str] = {}
    blocks: list[str] = []
    for message in old:
        blocks.extend(_render(message, names, max_chars_per_message))
    return "\n\n".join(blocks)


def summary_prompt(old: list[Message], *, max_chars_per_message: int = 20_000) -> list[Message]:
    """The request messages for the summariser route: one user message, instruction then transcript.

    Plain text because the summariser may be any provider and must not see tool-call structure
    it has no tools for (Anthropic and Gemini reject tool blocks without tool definitions).
    Each message is clipped in the middle to ``max_chars_per_message`` so one huge tool result
    cannot overflow the summariser's own window.
    """
    transcript = render_transcript(old, max_chars_per_message)
    return [{"role": "user", "content": f"{SUMMARY_INSTRUCTION}\n\n<conversation>\n{transcript}\n</conversation>"}]
