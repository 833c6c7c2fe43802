"""Gemini's ``embedContent`` (one input) and ``batchEmbedContents`` (more), split at the API's batch limit.

``batchEmbedContents`` takes at most ``BATCH_LIMIT`` requests per call, so a larger request
becomes several upstream calls, made by the caller of this adapter (``routing/embeddings.py``)
as one attempt: the vectors come back in input order, and one failed batch fails the attempt
(the route then fails over as a whole; a half-embedded input list is never returned).

Gemini takes text, not token ids: token arrays reach it as ``EmbeddingRequest.texts`` (decoded
by the surface with OpenAI's embedding tokenizer, the one such arrays are made with). It
reports no token usage for embeddings; the gateway's own count stands in.
"""

from __future__ import annotations

import array
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.canonical_embeddings import EmbeddingRequest, EmbeddingResult, Vector
from gateway.config.providers_section import ProviderConfig
from gateway.providers import urls
from gateway.providers.base import (
    MALFORMED,
    ErrorClass,
    ProviderError,
    UpstreamRequest,
    invalid_response,
    load_body,
)
from gateway.providers.gemini import GeminiAdapter

#: ``batchEmbedContents``' limit on requests per call
BATCH_LIMIT = 100

_chat = GeminiAdapter()


class GeminiEmbeddings:
    wire_format = "gemini"

    def build_embeddings(self, request: EmbeddingRequest, provider: ProviderConfig,
                         model: str) -> list[UpstreamRequest]:
        headers = {"content-type": "application/json"}
        if provider.api_key:
            headers["x-goog-api-key"] = provider.api_key
        headers.update(provider.headers)
        resource = urls.gemini_resource(model)
        texts = request.texts
        if len(texts) == 1:
            one = self._item(texts[0], resource, request.dimensions)
            return [UpstreamRequest(url=urls.gemini_embed(provider.base_url, model, False), headers=headers,
                                    body=orjson.dumps(one))]
        url = urls.gemini_embed(provider.base_url, model, True)
        return [UpstreamRequest(url=url, headers=headers, body=orjson.dumps(
                    {"requests": [self._item(text, resource, request.dimensions)
                                  for text in texts[start:start + BATCH_LIMIT]]}))
                for start in range(0, len(texts), BATCH_LIMIT)]

    @staticmethod
    def _item(text: str, resource: str, dimensions: int | None) -> dict[str, Any]:
        item: dict[str, Any] = {"model": resource, "content": {"parts": [{"text": text}]}}
        if dimensions is not None:
            item["outputDimensionality"] = dimensions
        return item

    def parse_embeddings(self, bodies: list[bytes], request: EmbeddingRequest) -> EmbeddingResult:
        vectors: list[Vector] = []
        try:
            if len(request.texts) == 1:
                payload = load_body(bodies[0])
                vectors.append(_values(payload["embedding"]))
            else:
                for body in bodies:
                    embeddings = load_body(body)["embeddings"]
                    if not isinstance(embeddings, list):
                        raise TypeError("embeddings")
                    vectors.extend(_values(item) for item in embeddings)
        except MALFORMED as exc:
            raise invalid_response(exc) from None
        if len(vectors) != len(request.texts):
            raise ProviderError(ErrorClass.INVALID_RESPONSE,
                                f"upstream returned {len(vectors)} embeddings for {len(request.texts)} inputs")
        return EmbeddingResult(vectors, None)

    def parse_error(self, status: int, headers: Mapping[str, str], body: bytes) -> ProviderError:
        return _chat.parse_error(status, headers, body)


def _values(embedding: Any) -> list[float]:
    values = embedding["values"]
    if not isinstance(values, list):
        raise TypeError("values")
    array.array("d", values)  # every item a number (C speed); a TypeError is a malformed answer
    return values
