"""Wire format name -> adapter. Adapters are stateless, so one instance each serves every request."""

from __future__ import annotations

from gateway.providers.base import Adapter
from gateway.providers.openai import OpenAIAdapter

ADAPTERS: dict[str, Adapter] = {
    "openai": OpenAIAdapter(),
}


def adapter_for(wire_format: str) -> Adapter:
    return ADAPTERS[wire_format]
