"""What an attempt cut after its commit point is billed: the usage it reported, else an estimate.

A rescued stream (``rescue.py``) bills the attempt that failed as well as the one that finished:
the provider charged for both. Anthropic and Gemini report usage as they go, but an
OpenAI-format stream reports it only in its last chunk, which a cut stream never sends: without
an estimate the tokens it produced (and the prompt it read) would be free to the caller's key
and missing from its budget. The estimate counts the request (messages and tool definitions)
and what the stream carried with the model's tokenizer (``context/encodings.py``); it is only
used for the counts the stream did not report, and only after a failure, never on the hot path.
Past ``COUNTED_CHARS`` the output is estimated at four characters a token rather than tokenised:
a cut stream may carry up to ``max_response_bytes`` of text, and tokenising that much would hold
the event loop for seconds and build a list of millions of token ids.
"""

from __future__ import annotations

from dataclasses import replace

from gateway.canonical import ModelRequest, Usage
from gateway.context.encodings import encoding_for_model
from gateway.context.tokens import count_messages, count_text, count_tools

COUNTED_CHARS = 256 * 1024


def cut_attempt_usage(reported: Usage, request: ModelRequest, produced: str, model: str) -> Usage:
    """``reported``, with the prompt and completion counts it lacks estimated (``produced``: the stream's output)."""
    if reported.prompt_tokens and reported.completion_tokens:
        return reported
    encoding = encoding_for_model(model)
    prompt = reported.prompt_tokens or count_messages(request.messages, encoding) + count_tools(request.tools, encoding)
    completion = reported.completion_tokens or (count_text(produced[:COUNTED_CHARS], encoding)
                                                + max(0, len(produced) - COUNTED_CHARS) // 4 if produced else 0)
    return replace(reported, prompt_tokens=prompt, completion_tokens=completion)
