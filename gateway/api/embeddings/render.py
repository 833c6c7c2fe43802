"""The OpenAI embeddings answer: ``data[]`` in input order, each vector as floats or base64 float32.

A vector is converted only when the upstream's form is not the one the caller asked for
(``canonical_embeddings``). The ``gateway`` object carries what every Loopgate answer carries:
who answered, the failover attempts, and the cost when the route is priced.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from gateway.canonical_embeddings import Vector, as_bytes, pack, unpack


def _as_float(vector: Vector) -> list[float]:
    return vector if isinstance(vector, list) else unpack(as_bytes(vector))


def _as_base64(vector: Vector) -> str:
    if isinstance(vector, str):
        return vector  # the upstream's own base64, checked when it was read
    return base64.b64encode(vector if isinstance(vector, bytes) else pack(vector)).decode("ascii")


def render_embeddings(vectors: list[Vector], encoding_format: str, model: str, prompt_tokens: int,
                      gateway: dict[str, Any]) -> bytes:
    convert = _as_base64 if encoding_format == "base64" else _as_float
    data = [{"object": "embedding", "index": index, "embedding": convert(vector)}
            for index, vector in enumerate(vectors)]
    return orjson.dumps({"object": "list", "data": data, "model": model,
                         "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
                         "gateway": gateway})
