"""The fake providers' embeddings endpoints: OpenAI's ``/embeddings``, Gemini's ``embedContent`` and
``batchEmbedContents`` (which, like Gemini, refuses more than 100 requests per call).

A vector is a pure function of the model, the input and the size (``vector_of``), so a test
computes the vector it expects for each input and checks order and content exactly.
"""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

#: the vector size when a request does not ask for one (models are named ``...-dN`` to choose another)
DEFAULT_DIMENSIONS = 8
GEMINI_BATCH_LIMIT = 100


def dimensions_for(model: str, asked: Any) -> int:
    """``asked`` (the request's ``dimensions``/``outputDimensionality``), else ``-dN`` in the model name, else 8.

    A model named ``...-ragged...`` answers the OpenAI wire with vectors of this size plus their index.
    """
    if isinstance(asked, int):
        return asked
    tail = model.rsplit("-d", 1)
    if len(tail) == 2 and tail[1].isdigit():
        return int(tail[1])
    return DEFAULT_DIMENSIONS


def vector_of(model: str, item: Any, dimensions: int) -> list[float]:
    """Float32-exact values (so a base64 round trip gives the same floats) made from the input's CRC."""
    seed = zlib.crc32(f"{model}|{item}".encode())
    return [struct.unpack("<f", struct.pack("<f", ((seed >> (i % 24)) % 1000) / 1000 - 0.5 + i / 4096))[0]
            for i in range(dimensions)]


def openai_answer(body: dict[str, Any], prompt_tokens: int | None) -> dict[str, Any]:
    model = body["model"]
    inputs = body["input"]
    if isinstance(inputs, str) or (inputs and isinstance(inputs[0], int)):
        inputs = [inputs]
    size = dimensions_for(model, body.get("dimensions"))
    base64_wanted = body.get("encoding_format") == "base64"
    data = []
    for index, item in enumerate(inputs):
        length = size + index if "-ragged" in model else size  # a broken server: every vector a different length
        vector = vector_of(model, item, length)
        embedding: Any = (base64.b64encode(struct.pack(f"<{length}f", *vector)).decode() if base64_wanted
                          else vector)
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    data.reverse()  # real servers may answer out of order: ``index`` says where each belongs
    tokens = prompt_tokens if prompt_tokens is not None else sum(
        len(item) if isinstance(item, list) else max(1, len(item) // 4) for item in inputs)
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def gemini_problems(body: dict[str, Any], path: str) -> list[str]:
    """What the real API would answer 400 to."""
    if path.endswith(":batchEmbedContents"):
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            return ["requests is required"]
        if len(requests) > GEMINI_BATCH_LIMIT:
            return [f"at most {GEMINI_BATCH_LIMIT} requests can be in one batch"]
        items = requests
    else:
        items = [body]
    for item in items:
        parts = (item.get("content") or {}).get("parts") if isinstance(item, dict) else None
        if not isinstance(parts, list) or not parts or not isinstance(parts[0].get("text"), str):
            return ["content.parts[].text is required"]
    return []


def gemini_answer(body: dict[str, Any], path: str) -> dict[str, Any]:
    model = path.split("/models/")[-1].split(":")[0]

    def one(item: dict[str, Any]) -> dict[str, Any]:
        text = item["content"]["parts"][0]["text"]
        return {"values": vector_of(model, text, dimensions_for(model, item.get("outputDimensionality")))}

    if path.endswith(":batchEmbedContents"):
        return {"embeddings": [one(item) for item in body["requests"]]}
    return {"embedding": one(body)}


def is_embeddings(path: str) -> bool:
    return path.endswith("/embeddings") or path.endswith(":embedContent") or path.endswith(":batchEmbedContents")
