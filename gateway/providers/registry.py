"""Wire format name -> adapter. Adapters are stateless, so one instance each serves every request."""

from __future__ import annotations

from gateway.providers.anthropic import AnthropicAdapter
from gateway.providers.base import Adapter
from gateway.providers.gemini import GeminiAdapter
from gateway.providers.openai import OpenAIAdapter

ADAPTERS: dict[str, Adapter] = {
    "openai": OpenAIAdapter(),
    "anthropic": AnthropicAdapter(),
    "gemini": GeminiAdapter(),
}


def adapter_for(wire_format: str) -> Adapter:
    return ADAPTERS[wire_format]
