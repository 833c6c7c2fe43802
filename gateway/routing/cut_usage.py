"""What an attempt cut after its commit point is billed: the usage it reported, else an estimate.

A rescued stream (``rescue.py``) bills the attempt that failed as well as the one that finished:
the provider charged for both. Anthropic and Gemini report usage as they go, but an
OpenAI-format stream reports it only in its last chunk, which a cut stream never sends: without
an estimate the tokens it produced (and the prompt it read) would be free to the caller's key
and missing from its budget. The estimate counts the request (messages and tool definitions)
and what the stream carried with the model's tokenizer (``context/encodings.py``); it is only
used for the counts the stream did not report, and only after a failure, never on the hot path.
The prompt may be megabytes (a long transcript): it is counted off the event loop past
``OFFLOAD_BYTES``, as every count a caller sizes is (context/offload.py). Past ``COUNTED_CHARS``
the output is estimated at four characters a token rather than tokenised: a cut stream may carry
up to ``max_response_bytes`` of text, and tokenising that much would take seconds of CPU and build
a list of millions of token ids.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gateway.canonical import ModelRequest, Usage
from gateway.context.offload import encoding_off_loop, off_loop_above, raw_prompt_tokens
from gateway.context.tokens import count_text

COUNTED_CHARS = 256 * 1024


async def cut_attempt_usage(reported: Usage, request: ModelRequest, produced: str, model: str) -> Usage:
    """``reported``, with the prompt and completion counts it lacks estimated (``produced``: the stream's output)."""
    if reported.prompt_tokens and reported.completion_tokens:
        return reported
    encoding = await encoding_off_loop(model)
    prompt = reported.prompt_tokens or await raw_prompt_tokens(request.messages, request.tools, encoding)
    completion = reported.completion_tokens or (await _output_tokens(produced, encoding) if produced else 0)
    return replace(reported, prompt_tokens=prompt, completion_tokens=completion)


async def _output_tokens(produced: str, encoding: Any) -> int:
    """The first ``COUNTED_CHARS`` tokenised (off the loop when large), the rest at four characters a token."""
    head = produced[:COUNTED_CHARS]
    counted = await off_loop_above(len(head), lambda: count_text(head, encoding))
    return counted + max(0, len(produced) - COUNTED_CHARS) // 4
