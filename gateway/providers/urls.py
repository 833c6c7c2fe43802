"""Every upstream URL, built here and only here, from percent-quoted path segments.

A model name can come from a caller (a direct route ``PROVIDER/UPSTREAM_MODEL``), so it must
never shape the request line: each piece of caller or config text becomes exactly one quoted
path segment (``/``, ``?``, ``#``, ``%``, spaces and non-ASCII all percent-encoded), and
names that could still mean something else to a server that decodes the path (``.``/``..``
segments, backslashes, whitespace, control characters, ``?``, ``#``) are refused before any
URL is built: ``gateway.config.model_names.model_problem`` is checked at config load for configured
targets and per new direct name at request time.

Gemini names a model as a resource: ``gemini-2.5-pro``, ``models/gemini-2.5-pro`` or a tuned
model ``tunedModels/NAME``. The collection (``models`` or ``tunedModels``) is kept as a path
segment; everything after it is one quoted segment, so any other ``/`` is sent as ``%2F``.

URLs are memoised (bounded): a configured target's URL is built once, not per request.
"""

from __future__ import annotations

import functools
from urllib.parse import quote

_CACHE_SIZE = 4096

def _segment(text: str) -> str:
    return quote(text, safe="")


@functools.lru_cache(maxsize=_CACHE_SIZE)
def openai_chat(base_url: str) -> str:
    return f"{base_url}/chat/completions"


@functools.lru_cache(maxsize=_CACHE_SIZE)
def azure_chat(base_url: str, deployment: str, api_version: str) -> str:
    return (f"{base_url}/openai/deployments/{_segment(deployment)}/chat/completions"
            f"?api-version={_segment(api_version)}")


@functools.lru_cache(maxsize=_CACHE_SIZE)
def openai_responses(base_url: str) -> str:
    return f"{base_url}/responses"


@functools.lru_cache(maxsize=_CACHE_SIZE)
def azure_responses(base_url: str, api_version: str | None, action: str = "") -> str:
    """Azure OpenAI's v1 API: ``{resource}/openai/v1/responses`` (a base URL may already end in ``/openai/v1``);
    the model is the deployment, named in the body. ``api-version`` only when configured (v1 needs none).
    ``action``: a sub-resource (``/input_tokens``)."""
    base = base_url if base_url.endswith("/openai/v1") else f"{base_url}/openai/v1"
    query = f"?api-version={_segment(api_version)}" if api_version else ""
    return f"{base}/responses{action}{query}"


@functools.lru_cache(maxsize=_CACHE_SIZE)
def openai_input_tokens(base_url: str) -> str:
    return f"{base_url}/responses/input_tokens"


@functools.lru_cache(maxsize=_CACHE_SIZE)
def anthropic_messages(base_url: str) -> str:
    base = base_url.rstrip("/")
    return f"{base}/messages" if base.endswith("/v1") else f"{base}/v1/messages"


@functools.lru_cache(maxsize=_CACHE_SIZE)
def anthropic_count_tokens(base_url: str) -> str:
    return f"{anthropic_messages(base_url)}/count_tokens"


def gemini_resource(model: str) -> str:
    """The model's resource name: ``models/NAME``, unless the name already says its collection (``tunedModels/…``)."""
    collection, slash, _ = model.partition("/")
    return model if slash and collection in ("models", "tunedModels") else f"models/{model}"


def _gemini_method(base_url: str, model: str, action: str) -> str:
    collection, _, name = gemini_resource(model).partition("/")
    return f"{base_url}/v1beta/{collection}/{_segment(name)}:{action}"


@functools.lru_cache(maxsize=_CACHE_SIZE)
def gemini_generate(base_url: str, model: str, stream: bool) -> str:
    return _gemini_method(base_url, model, "streamGenerateContent?alt=sse" if stream else "generateContent")


@functools.lru_cache(maxsize=_CACHE_SIZE)
def gemini_count_tokens(base_url: str, model: str) -> str:
    return _gemini_method(base_url, model, "countTokens")


@functools.lru_cache(maxsize=_CACHE_SIZE)
def openai_embeddings(base_url: str) -> str:
    return f"{base_url}/embeddings"


@functools.lru_cache(maxsize=_CACHE_SIZE)
def azure_embeddings(base_url: str, deployment: str, api_version: str) -> str:
    return (f"{base_url}/openai/deployments/{_segment(deployment)}/embeddings"
            f"?api-version={_segment(api_version)}")


@functools.lru_cache(maxsize=_CACHE_SIZE)
def gemini_embed(base_url: str, model: str, batch: bool) -> str:
    """``embedContent`` (one input) or ``batchEmbedContents``, on the model resource as ``gemini_generate`` names it."""
    return _gemini_method(base_url, model, "batchEmbedContents" if batch else "embedContent")
