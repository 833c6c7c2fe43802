"""The long tail (Bedrock, Vertex, Cohere, ...) through LiteLLM, an optional extra.

LiteLLM is not a wire format but a client library that speaks many of them, so this
adapter calls it instead of building HTTP requests. ``import litellm`` costs seconds and
hundreds of MB, which a gateway without a ``litellm`` provider never pays; one with such a
provider pays it at start-up (``preload``, off the event loop, before it is ready), never in its
first request, where the import held the event loop, and every request of the process, for
seconds. Its responses are already OpenAI-shaped, so they are parsed by the OpenAI adapter's
parsers, and its exceptions carry HTTP statuses, which map to the same canonical error classes
as every other provider.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator
from typing import Any

import orjson

from gateway.canonical import ModelRequest, ModelResponse, StreamDelta
from gateway.canonical_embeddings import EmbeddingRequest, EmbeddingResult
from gateway.config.providers_section import ProviderConfig
from gateway.providers.base import ErrorClass, ProviderError, SSEEvent, class_for_status, looks_like_context_overflow
from gateway.providers.openai import OpenAIAdapter
from gateway.providers.openai_embeddings import embeddings_body, parse_embeddings_payload
from gateway.upstream.errors import ResponseTooLarge

_openai = OpenAIAdapter()


def _library() -> Any:
    # Never fetch LiteLLM's model cost map from the internet at import (a gateway often has no egress).
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    litellm.drop_params = True  # parameters a provider does not support are dropped, not fatal
    return litellm


def preload() -> None:
    """Import LiteLLM now (at start-up, in a thread): a later ``_library()`` is a dict lookup."""
    _library()


def _dump(value: Any) -> bytes:
    if hasattr(value, "model_dump"):
        value = value.model_dump(exclude_none=True)
    return orjson.dumps(value, default=str)


def _error(exc: Exception) -> ProviderError:
    if isinstance(exc, ProviderError):
        return exc
    status = getattr(exc, "status_code", None)
    message = str(getattr(exc, "message", None) or exc)
    name = type(exc).__name__
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or name == "Timeout":
        return ProviderError(ErrorClass.TIMEOUT, message, status)
    if name == "APIConnectionError":
        return ProviderError(ErrorClass.CONNECTION, message, status)
    if name == "ContextWindowExceededError" or looks_like_context_overflow(message):
        return ProviderError(ErrorClass.CONTEXT_LENGTH, message, status)
    if isinstance(status, int) and status >= 400:
        return ProviderError(class_for_status(status), message, status)
    return ProviderError(ErrorClass.SERVER_ERROR, f"{name}: {message}", status if isinstance(status, int) else None)


class LiteLLMAdapter:
    wire_format = "litellm"
    in_process = True  # the router calls complete()/stream(), not the HTTP transport

    def _kwargs(self, request: ModelRequest, provider: ProviderConfig, model: str, timeout: float) -> dict[str, Any]:
        body = orjson.loads(_openai.build_request(request, provider, model, stream=False).body)
        body["timeout"] = timeout
        if provider.api_key:
            body["api_key"] = provider.api_key
        if provider.base_url:
            body["api_base"] = provider.base_url
        if provider.headers:
            body["extra_headers"] = provider.headers
        return body

    async def complete(self, request: ModelRequest, provider: ProviderConfig, model: str,
                       timeout: float) -> ModelResponse:
        litellm = _library()
        try:
            response = await litellm.acompletion(**self._kwargs(request, provider, model, timeout))
        except Exception as exc:
            raise _error(exc) from None
        return _openai.parse_response(_dump(response))

    async def stream(self, request: ModelRequest, provider: ProviderConfig, model: str, timeout: float,
                     label: str = "") -> AsyncGenerator[list[StreamDelta] | ModelResponse, None]:
        litellm = _library()
        # Malformed events are counted under the target's metric label: never the model name a
        # direct route's caller chose (an unbounded label set).
        parser = _openai.new_stream_parser(label or f"{provider.name}:*", model)
        try:
            kwargs = self._kwargs(request, provider, model, timeout)
            kwargs["stream"] = True
            kwargs["stream_options"] = {"include_usage": True}
            chunks = await litellm.acompletion(**kwargs)
            left = provider.limits.max_response_bytes  # the whole stream, as the HTTP transport bounds it
            async for chunk in chunks:
                data = _dump(chunk)
                left -= len(data)
                if left < 0:
                    raise ResponseTooLarge("upstream stream is larger than max_response_bytes "
                                           f"({provider.limits.max_response_bytes})")
                deltas = parser.feed(SSEEvent(None, data))
                if deltas:
                    yield deltas
        except Exception as exc:
            raise _error(exc) from None
        parser.feed(SSEEvent(None, b"[DONE]"))
        yield parser.finish()


class LiteLLMEmbeddings:
    """Embeddings through ``litellm.aembedding``: the OpenAI-shaped request in, the OpenAI-shaped answer out.

    The inputs go as text (token arrays decoded by the surface): most providers behind LiteLLM take no token ids.
    """

    wire_format = "litellm"
    in_process = True

    async def embed(self, request: EmbeddingRequest, provider: ProviderConfig, model: str,
                    timeout: float) -> EmbeddingResult:
        litellm = _library()
        kwargs = embeddings_body(request, model, text_only=True)
        kwargs["timeout"] = timeout
        if provider.api_key:
            kwargs["api_key"] = provider.api_key
        if provider.base_url:
            kwargs["api_base"] = provider.base_url
        if provider.headers:
            kwargs["extra_headers"] = provider.headers
        try:
            response = await litellm.aembedding(**kwargs)
        except Exception as exc:
            raise _error(exc) from None
        return parse_embeddings_payload(orjson.loads(_dump(response)), len(request.inputs))
