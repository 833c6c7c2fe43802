"""Prompt-size estimates: per-message token counts, tool definitions, and per-target calibration.

Counting follows OpenAI's published rule for chat models (3 tokens per message, the encoded
role/content/name, 1 more for a name, 3 priming the reply) and extends it to what the
canonical transcript carries: tool calls (name and arguments), ``reasoning_content`` and the
text of ``thinking_blocks``. For Anthropic, Gemini and other upstreams the count is an
estimate; ``TokenEstimator`` learns each target's ratio of reported ``prompt_tokens`` to our
estimate and scales by it.

The loop re-checks the whole transcript before every model call, so per-message counts are
cached: the key is a hash of the message's JSON, far cheaper than encoding it (bench/README.md)
and safe against dicts mutated or ids reused, unlike ``id(message)``.
A 20-iteration loop thus encodes each message once, not 20 times.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

import orjson
import tiktoken

from gateway.canonical import Message, ToolDef
from gateway.context.encode import count
from gateway.context.encodings import (
    CL100K,
    ENCODING_NAMES,
    O200K,
    clear_loaded,
    encoding_for_model,
    encoding_name_for_model,
    get_encoding,
    is_loaded,
    preload,
)

__all__ = [
    "CL100K", "ENCODING_NAMES", "O200K", "TokenEstimator", "cached_counts", "clear_loaded", "count_message",
    "count_messages", "count_text", "count_tools", "encoding_for_model", "encoding_name_for_model", "get_encoding",
    "is_loaded", "preload",
]

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
# Per tool call: the call's framing (id, type, braces) in the provider's own rendering, an estimate.
TOKENS_PER_TOOL_CALL = 3
# An image/audio/file part: OpenAI bills a 1024x1024 high-detail image ~765 tokens; others differ,
# and the calibration ratio absorbs the rest.
TOKENS_PER_MEDIA_PART = 765

_TEXT_PART_TYPES = ("text", "input_text", "output_text")


_Key = tuple[str, int, int]


class _CountCache:
    """A bounded, thread-safe LRU of token counts keyed by (encoding, JSON length, JSON hash)."""

    def __init__(self, limit: int = 16384) -> None:
        self._limit = limit
        self._items: OrderedDict[_Key, int] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: _Key) -> int | None:
        with self._lock:
            value = self._items.get(key)
            if value is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: _Key, value: int) -> None:
        with self._lock:
            self._items[key] = value
            if len(self._items) > self._limit:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.hits = self.misses = 0


COUNT_CACHE = _CountCache()


def _keyed(encoding: tiktoken.Encoding, value: Any) -> tuple[_Key, int] | None:
    """(cache key, JSON size) of ``value``; None if it is not JSON (count it then, just do not cache it).

    The key is the JSON's length and its 64-bit ``hash`` (keyed SipHash): cheaper than a
    cryptographic digest, and a collision (~1e-11 across a full cache) could only mis-size one estimate.
    """
    try:
        data = orjson.dumps(value)
    except TypeError:
        return None
    return (encoding.name, len(data), hash(data)), len(data)


def count_text(text: str, encoding: tiktoken.Encoding) -> int:
    """Tokens of ``text``; special-token strings inside it count as plain text (they are data here).

    Never raises but an exit: a text tiktoken would panic on is cut or sized by bytes (context/encode.py).
    """
    return count(encoding, text)


def _content_tokens(content: Any, encoding: tiktoken.Encoding) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return count_text(content, encoding)
    total = 0
    for part in content if isinstance(content, list) else (content,):
        if isinstance(part, str):
            total += count_text(part, encoding)
        elif isinstance(part, dict) and part.get("type") in _TEXT_PART_TYPES:
            total += count_text(part.get("text") or "", encoding)
        elif isinstance(part, dict):
            total += TOKENS_PER_MEDIA_PART
    return total


def _thinking_tokens(blocks: Any, encoding: tiktoken.Encoding) -> int:
    total = 0
    for block in blocks if isinstance(blocks, list) else ():
        if not isinstance(block, dict):
            continue
        if block.get("type") == "thinking":
            total += count_text(block.get("thinking") or "", encoding)
        elif block.get("type") == "redacted_thinking":
            total += len(block.get("data") or "") // 4  # encrypted: roughly 4 characters a token
    return total


def _message_tokens(message: Message, encoding: tiktoken.Encoding) -> int:
    total = TOKENS_PER_MESSAGE + count_text(str(message.get("role") or ""), encoding)
    total += _content_tokens(message.get("content"), encoding)
    name = message.get("name")
    if isinstance(name, str) and name:
        total += count_text(name, encoding) + TOKENS_PER_NAME
    for call in message.get("tool_calls") or ():
        function = (call.get("function") or {}) if isinstance(call, dict) else {}
        total += TOKENS_PER_TOOL_CALL + count_text(str(function.get("name") or ""), encoding)
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = orjson.dumps(arguments, default=str).decode()
        total += count_text(arguments, encoding)
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str):
        total += count_text(reasoning, encoding)
    total += _thinking_tokens(message.get("thinking_blocks"), encoding)
    return total


def count_message(message: Message, encoding: tiktoken.Encoding) -> int:
    """Tokens one message adds to a prompt (cached by content, so re-counting a transcript is cheap)."""
    keyed = _keyed(encoding, message)
    if keyed is not None:
        cached = COUNT_CACHE.get(keyed[0])
        if cached is not None:
            return cached
    value = _message_tokens(message, encoding)
    if keyed is not None:
        COUNT_CACHE.put(keyed[0], value)
    return value


def cached_counts(messages: Sequence[Message], encoding: tiktoken.Encoding) -> tuple[list[int | None], int]:
    """Counts already in the cache (None where not) and the JSON size of the messages still to encode.

    Lets a caller on the event loop decide whether encoding the rest is worth a worker thread
    (tiktoken releases the GIL while it encodes).
    """
    counts: list[int | None] = []
    pending_bytes = 0
    for message in messages:
        keyed = _keyed(encoding, message)
        value = COUNT_CACHE.get(keyed[0]) if keyed is not None else None
        if value is None:
            pending_bytes += keyed[1] if keyed is not None else 0
        counts.append(value)
    return counts, pending_bytes


def count_messages(messages: Iterable[Message], encoding: tiktoken.Encoding) -> int:
    """Prompt tokens of ``messages``: every message plus the 3 tokens priming the reply."""
    return REPLY_PRIMING + sum(count_message(message, encoding) for message in messages)


def count_tools(tool_defs: Sequence[ToolDef], encoding: tiktoken.Encoding | None = None) -> int:
    """Tokens of the tool definitions, estimated as their serialised JSON (providers render them their own way)."""
    if not tool_defs:
        return 0
    encoding = encoding or get_encoding(O200K)
    tools = list(tool_defs)
    keyed = _keyed(encoding, tools)
    cached = COUNT_CACHE.get(keyed[0]) if keyed is not None else None
    if cached is None:
        cached = count_text(orjson.dumps(tools, default=str).decode(), encoding)
        if keyed is not None:
            COUNT_CACHE.put(keyed[0], cached)
    return cached


def _model_of(target_label: str) -> str:
    """``provider:model`` (``TargetConfig.label``) -> ``model``; a bare model name stays as it is."""
    _, sep, model = target_label.partition(":")
    return model if sep else target_label


class TokenEstimator:
    """Estimates a request's size for a target, corrected by what that target reported before.

    The correction is a ratio per target label: an exponential moving average of
    ``actual prompt_tokens / our raw estimate``, clamped to [0.5, 3.0] so one odd report (a
    provider counting cached tokens apart, an image priced differently) cannot make the guard
    wildly optimistic or trigger compression on every call. The first report seeds the ratio.
    """

    MIN_RATIO = 0.5
    MAX_RATIO = 3.0

    def __init__(self, alpha: float = 0.3) -> None:
        self._alpha = alpha
        self._ratios: dict[str, float] = {}
        self._lock = threading.Lock()

    def ratio(self, target_label: str) -> float:
        """The calibration ratio of ``target_label`` (1.0 until it has reported once)."""
        return self._ratios.get(target_label, 1.0)

    def count(self, messages: Sequence[Message], tools: Sequence[ToolDef], *, model: str) -> int:
        """The raw (uncalibrated) prompt estimate with ``model``'s encoding; what ``observe`` expects."""
        encoding = encoding_for_model(model)
        return count_messages(messages, encoding) + count_tools(tools, encoding)

    def calibrated(self, target_label: str, raw_tokens: int) -> int:
        """``raw_tokens`` scaled by the target's ratio, rounded up."""
        return math.ceil(raw_tokens * self.ratio(target_label))

    def estimate(self, target_label: str, messages: Sequence[Message], tools: Sequence[ToolDef],
                 reserve_output: int = 0, *, model: str | None = None) -> int:
        """Calibrated prompt tokens plus ``reserve_output``: the room this call needs in the window.

        ``model`` picks the encoding; by default it is taken from ``target_label`` (``provider:model``).
        """
        raw = self.count(messages, tools, model=model or _model_of(target_label))
        return self.calibrated(target_label, raw) + max(0, reserve_output)

    def observe(self, target_label: str, estimated: int, actual_prompt_tokens: int) -> float:
        """Fold one provider report into the ratio; ``estimated`` is the RAW estimate (``count``).

        Reports of zero (a provider that sent no usage) are ignored. Returns the new ratio.
        """
        if estimated <= 0 or actual_prompt_tokens <= 0:
            return self.ratio(target_label)
        sample = min(self.MAX_RATIO, max(self.MIN_RATIO, actual_prompt_tokens / estimated))
        with self._lock:
            previous = self._ratios.get(target_label)
            ratio = sample if previous is None else previous + self._alpha * (sample - previous)
            ratio = min(self.MAX_RATIO, max(self.MIN_RATIO, ratio))
            self._ratios[target_label] = ratio
        return ratio
