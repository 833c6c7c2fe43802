"""Capping one tool result to a token budget, cutting the middle.

The head of a tool result usually says what it is (headers, the first rows, a status line) and
the tail how it ended (totals, the last error, a stack trace's cause), so both are kept and the
middle goes. A marker says how much was removed, so the model knows the result is incomplete
and can ask for a narrower one. Cuts are on token boundaries and any UTF-8 character split
by a cut is dropped rather than rendered as U+FFFD.
"""

from __future__ import annotations

import tiktoken

from gateway.canonical import Message, rewritten
from gateway.context.encode import count, encode

MARKER = "\n[... {count} tokens truncated by the gateway ...]\n"


def _marker(count: int) -> str:
    return MARKER.format(count=count)


def cap_tool_result(text: str, max_tokens: int, encoding: tiktoken.Encoding) -> str:
    """``text`` unchanged if it has at most ``max_tokens`` tokens, else its head and tail around a marker.

    The result, re-encoded, has at most ``max_tokens`` tokens (unless the marker alone is longer),
    so capping a capped text again leaves it unchanged.
    """
    if max_tokens <= 0 or not text:
        return text
    tokens = encode(encoding, text)  # never raises (a million spaces would make tiktoken panic)
    if len(tokens) <= max_tokens:
        return text
    budget = max_tokens - count(encoding, _marker(len(tokens)))
    # Re-encoding joined text can merge tokens across the seams differently; shrink until it fits.
    for _ in range(8):
        keep = max(0, budget)
        head_n = (keep + 1) // 2
        tail_n = keep - head_n
        head = encoding.decode_bytes(tokens[:head_n]).decode("utf-8", "ignore")
        tail = encoding.decode_bytes(tokens[len(tokens) - tail_n:] if tail_n else []).decode("utf-8", "ignore")
        result = head + _marker(len(tokens) - head_n - tail_n) + tail
        over = count(encoding, result) - max_tokens
        if over <= 0 or keep == 0:
            return result
        budget -= over
    return result


def cap_tool_messages(messages: list[Message], max_tokens: int | None, encoding: tiktoken.Encoding) -> list[Message]:
    """``messages`` with the string content of each ``tool`` message capped to ``max_tokens``.

    Messages that need no cut are returned as the same objects; a capped one is a new dict
    (the caller's copy is never modified). ``max_tokens`` None or 0 disables the cap.
    """
    if not max_tokens:
        return messages
    out: list[Message] = []
    for message in messages:
        content = message.get("content")
        if message.get("role") == "tool" and isinstance(content, str):
            capped = cap_tool_result(content, max_tokens, encoding)
            if capped is not content:
                message = rewritten(message, content=capped)
        out.append(message)
    return out
