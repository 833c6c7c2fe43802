"""Wire format name -> adapter. Adapters are stateless, so one instance each serves every request.

``litellm`` is the exception to "one adapter per wire format": it wraps a client library
(imported only when such a target is first called) and the router calls it directly.
"""

from __future__ import annotations

from typing import Any

from gateway.providers.anthropic import AnthropicAdapter
from gateway.providers.gemini import GeminiAdapter
from gateway.providers.litellm import LiteLLMAdapter
from gateway.providers.openai import OpenAIAdapter

ADAPTERS: dict[str, Any] = {
    "openai": OpenAIAdapter(),
    "anthropic": AnthropicAdapter(),
    "gemini": GeminiAdapter(),
    "litellm": LiteLLMAdapter(),
}


def adapter_for(wire_format: str) -> Any:
    """The adapter for a provider ``type`` (an ``Adapter``; for ``litellm`` a ``LiteLLMAdapter``)."""
    return ADAPTERS[wire_format]
