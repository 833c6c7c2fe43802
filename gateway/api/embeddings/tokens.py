"""Counting an embeddings request's input tokens before it is sent, and decoding token arrays for text-only targets.

The count is OpenAI's embedding tokenizer (``cl100k_base``, the one ``text-embedding-3-*`` and
``ada-002`` use, and the one clients such as LangChain make token arrays with): exact for those
models, an estimate for others. It feeds the bounds (``max_input_tokens``, ``max_total_tokens``),
the rate limiter's tpm estimate, and the usage when an upstream reports none (Gemini). A token
array counts as its length. The tokenizer is loaded once, on a worker thread; a large request is
counted on a worker thread too, so the event loop never encodes megabytes.
"""

from __future__ import annotations

import asyncio

import tiktoken

from gateway.context.encode import count
from gateway.context.encodings import CL100K, get_encoding, is_loaded
from gateway.errors import bad_request

#: above this many characters in all, the encoding runs on a worker thread
THREAD_ABOVE_CHARS = 64 * 1024


async def _encoding() -> tiktoken.Encoding:
    if not is_loaded(CL100K):  # the first load reads a file and builds tables: not on the event loop
        return await asyncio.to_thread(get_encoding, CL100K)
    return get_encoding(CL100K)


def _count(encoding: tiktoken.Encoding, texts: list[str]) -> list[int]:
    return [count(encoding, text) for text in texts]  # never raises but an exit (context/encode.py)


async def count_inputs(inputs: list[str] | list[list[int]]) -> list[int]:
    """Each input's tokens, in order."""
    if not isinstance(inputs[0], str):
        return [len(tokens) for tokens in inputs]
    texts: list[str] = inputs
    encoding = await _encoding()
    if sum(map(len, texts)) > THREAD_ABOVE_CHARS:
        return await asyncio.to_thread(_count, encoding, texts)
    return _count(encoding, texts)


async def decode_inputs(arrays: list[list[int]]) -> list[str]:
    """Token arrays as the text they encode, for a target that takes text only; a 400 for an unknown token id."""
    encoding = await _encoding()
    vocabulary = encoding.n_vocab
    for index, tokens in enumerate(arrays):
        if max(tokens) >= vocabulary:
            raise bad_request(f"input[{index}] holds a token id outside the {CL100K} vocabulary; this route's "
                              "targets take text, so token arrays are decoded with it", f"input[{index}]",
                              "invalid_token")
    texts = []
    for index, tokens in enumerate(arrays):
        try:
            texts.append(encoding.decode(tokens))
        except (KeyError, ValueError, OverflowError):  # an id inside the range that names no token
            raise bad_request(f"input[{index}] holds a token id the {CL100K} vocabulary does not have",
                              f"input[{index}]", "invalid_token") from None
    return texts
