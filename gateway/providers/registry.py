"""Wire format name -> adapter. Adapters are stateless, so one instance each serves every request.

``litellm`` and ``mock`` are the exceptions to "one adapter per wire format": ``in_process``
adapters that the router calls directly instead of the HTTP transport (litellm wraps a client
library imported only when such a target is first called; mock answers by itself).
"""

from __future__ import annotations

from typing import Any

from gateway.providers.anthropic import AnthropicAdapter
from gateway.providers.gemini import GeminiAdapter
from gateway.providers.gemini_embeddings import GeminiEmbeddings
from gateway.providers.litellm import LiteLLMAdapter, LiteLLMEmbeddings
from gateway.providers.mock import MockAdapter
from gateway.providers.openai import OpenAIAdapter
from gateway.providers.openai_embeddings import OpenAIEmbeddings
from gateway.providers.openai_responses import OpenAIResponsesAdapter

ADAPTERS: dict[str, Any] = {
    "openai": OpenAIAdapter(),
    "openai_responses": OpenAIResponsesAdapter(),
    "anthropic": AnthropicAdapter(),
    "gemini": GeminiAdapter(),
    "litellm": LiteLLMAdapter(),
    "mock": MockAdapter(),
}


def adapter_for(wire_format: str) -> Any:
    """The adapter for a provider ``type`` (an ``Adapter``, or an ``InProcessAdapter`` for litellm and mock)."""
    return ADAPTERS[wire_format]


#: the embeddings adapters, by provider ``type``: only these types may be embeddings targets
#: (``config/embeddings_section.py`` checks the same list)
EMBEDDERS: dict[str, Any] = {
    "openai": OpenAIEmbeddings(),
    "gemini": GeminiEmbeddings(),
    "litellm": LiteLLMEmbeddings(),
}


def embedder_for(wire_format: str) -> Any:
    """The embeddings adapter for a provider ``type`` (litellm's answers in process: ``in_process``)."""
    return EMBEDDERS[wire_format]
