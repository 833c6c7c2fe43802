"""OpenAI's ``POST /embeddings`` and every server that speaks it (Azure OpenAI, vLLM, Ollama, ...).

The request is the caller's, re-built from the canonical form (never forwarded raw): inputs as
strings or token arrays, ``dimensions``, ``user``, and ``encoding_format: base64`` when the caller
asked for it (a server that ignores the field answers floats, which are read as well). Errors
share the chat adapter's reading (``OpenAIAdapter.parse_error``): one wire format, one error shape.
"""

from __future__ import annotations

import array
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.canonical import token_count
from gateway.canonical_embeddings import EmbeddingRequest, EmbeddingResult, Vector, checked_base64
from gateway.config.providers_section import ProviderConfig
from gateway.providers import urls
from gateway.providers.base import (
    MALFORMED,
    ErrorClass,
    ProviderError,
    UpstreamRequest,
    invalid_response,
    load_body,
    reported_model,
)
from gateway.providers.openai import OpenAIAdapter, request_headers

_chat = OpenAIAdapter()


def embeddings_body(request: EmbeddingRequest, model: str, text_only: bool = False) -> dict[str, Any]:
    """The OpenAI-shaped request body for ``model`` (also what the litellm adapter passes on).

    ``text_only``: the inputs as text (``request.texts``: token arrays decoded), for a target that may
    not take token ids."""
    body: dict[str, Any] = {"model": model, "input": request.texts if text_only else request.inputs}
    if request.dimensions is not None:
        body["dimensions"] = request.dimensions
    if request.encoding_format == "base64":
        body["encoding_format"] = "base64"
    if request.user is not None:
        body["user"] = request.user
    return body


def parse_embeddings_payload(payload: Any, count: int) -> EmbeddingResult:
    """An OpenAI-shaped answer: ``data[].embedding`` (floats or base64) put back in input order by ``index``."""
    if not isinstance(payload, dict):
        raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream returned an unexpected JSON document")
    try:
        data = payload["data"]
        if not isinstance(data, list) or len(data) != count:
            raise ProviderError(ErrorClass.INVALID_RESPONSE,
                                f"upstream returned {len(data) if isinstance(data, list) else 'no'} embeddings "
                                f"for {count} inputs")
        vectors: list[Vector | None] = [None] * count
        for position, item in enumerate(data):
            index = item.get("index", position)
            if not isinstance(index, int) or not 0 <= index < count or vectors[index] is not None:
                raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream returned embeddings with wrong indexes")
            vectors[index] = _vector(item["embedding"])
        usage = payload.get("usage")
        prompt = token_count(usage.get("prompt_tokens")) if isinstance(usage, dict) else 0
        return EmbeddingResult([v for v in vectors if v is not None], prompt or None,
                               reported_model(payload.get("model")))
    except MALFORMED as exc:
        raise invalid_response(exc) from None


def _vector(value: Any) -> Vector:
    if isinstance(value, str):
        checked = checked_base64(value)
        if checked is None:
            raise ProviderError(ErrorClass.INVALID_RESPONSE,
                                "upstream returned an embedding that is not base64 of whole float32 values")
        return checked
    if not isinstance(value, list):
        raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream returned an embedding that is not a list")
    array.array("d", value)  # every item a number (C speed); a TypeError is a malformed answer
    return value


class OpenAIEmbeddings:
    wire_format = "openai"

    def build_embeddings(self, request: EmbeddingRequest, provider: ProviderConfig,
                         model: str) -> list[UpstreamRequest]:
        url = (urls.azure_embeddings(provider.base_url, model, provider.api_version) if provider.api_version
               else urls.openai_embeddings(provider.base_url))
        return [UpstreamRequest(url=url, headers=request_headers(provider),
                                body=orjson.dumps(embeddings_body(request, model)))]

    def parse_embeddings(self, bodies: list[bytes], request: EmbeddingRequest) -> EmbeddingResult:
        return parse_embeddings_payload(load_body(bodies[0]), len(request.inputs))

    def parse_error(self, status: int, headers: Mapping[str, str], body: bytes) -> ProviderError:
        return _chat.parse_error(status, headers, body)
