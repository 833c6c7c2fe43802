"""Tokenizing off the event loop: every count or cut whose input a caller or a tool sizes goes through here.

Encoding is CPU work proportional to the text (seconds for a 12 MB tool result, far more for text
that splits into many short pieces), and on the event loop it stalls every request of the worker,
every tenant's. tiktoken releases the GIL while it encodes, so a worker thread lets the loop go on.
A thread hop costs ~50-100 µs, so inputs up to ``OFFLOAD_BYTES`` are still encoded inline: the
common small request pays nothing more (bench/README.md).

The helpers wrap the counting functions of ``tokens.py`` and ``truncate.py`` unchanged; the
per-message count cache stays the one place counts are kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TypeVar, cast

import tiktoken

from gateway.canonical import Message, ToolDef
from gateway.context.encodings import encoding_name_for_model, get_encoding, is_loaded
from gateway.context.tokens import REPLY_PRIMING, cached_counts, count_message, count_tools

__all__ = ["OFFLOAD_BYTES", "encoding_off_loop", "message_counts", "off_loop_above", "raw_prompt_tokens",
           "tools_tokens"]

#: uncached text past this many bytes (~8K tokens, ~1-5 ms of encoding) is encoded on a worker thread
OFFLOAD_BYTES = 32_768

_T = TypeVar("_T")


async def off_loop_above(size: int, work: Callable[[], _T]) -> _T:
    """``work()`` inline for ``size`` up to ``OFFLOAD_BYTES`` bytes of input, else on a worker thread."""
    return await asyncio.to_thread(work) if size > OFFLOAD_BYTES else work()


async def encoding_off_loop(model: str) -> tiktoken.Encoding:
    """``model``'s encoding; its first load (0.15-0.4 s: a file read and table build) on a worker thread."""
    name = encoding_name_for_model(model)
    return get_encoding(name) if is_loaded(name) else await asyncio.to_thread(get_encoding, name)


async def message_counts(messages: Sequence[Message], encoding: tiktoken.Encoding) -> list[int]:
    """Per-message counts: cache hits inline; a large uncached remainder is encoded on a worker thread."""
    found, pending_bytes = cached_counts(messages, encoding)
    missing = [index for index, value in enumerate(found) if value is None]
    counts = [value or 0 for value in found]
    if missing:
        def encode() -> list[int]:
            return [count_message(messages[index], encoding) for index in missing]

        for index, value in zip(missing, await off_loop_above(pending_bytes, encode), strict=True):
            counts[index] = value
    return counts


async def tools_tokens(tools: Sequence[ToolDef], encoding: tiktoken.Encoding) -> int:
    """``count_tools``, on a worker thread for large uncached definitions (a caller may send 2,000 tools)."""
    if not tools:
        return 0
    listed = list(tools)
    # count_tools caches the list under the key cached_counts computes for any JSON value: one serialisation
    # tells whether it is cached and, if not, how large it is
    found, pending_bytes = cached_counts([cast(Message, listed)], encoding)
    if found[0] is not None:
        return found[0]
    return await off_loop_above(pending_bytes, lambda: count_tools(listed, encoding))


async def raw_prompt_tokens(messages: Sequence[Message], tools: Sequence[ToolDef], encoding: tiktoken.Encoding) -> int:
    """The raw (uncalibrated) prompt estimate, as ``TokenEstimator.count`` makes it, off the loop when large."""
    return REPLY_PRIMING + sum(await message_counts(messages, encoding)) + await tools_tokens(tools, encoding)
