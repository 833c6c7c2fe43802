"""Context windows: the route's configured value, else a table of well-known models, else 8,192.

The table is matched by prefix on the lower-cased model name with any ``provider/`` path and
Bedrock-style ``[region.]vendor.`` prefix removed; the longest matching prefix wins, so a
specific entry (``gpt-4-turbo``) overrides a family (``gpt-4``). Values are the providers'
documented input windows; where a family has members with smaller windows the smaller
member gets its own entry. An unknown model gets a deliberately small default: compressing
too early costs a summary, overflowing costs a failed request.
"""

from __future__ import annotations

import re

DEFAULT_WINDOW = 8_192

KNOWN_WINDOWS: dict[str, int] = {
    # OpenAI
    "gpt-5": 400_000,
    "gpt-5-chat": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.5": 128_000,
    "gpt-4o": 128_000,
    "chatgpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4-1106": 128_000,
    "gpt-4-0125": 128_000,
    "gpt-4-32k": 32_768,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "gpt-35-turbo": 16_385,
    "gpt-oss": 131_072,
    "o1": 200_000,
    "o1-mini": 128_000,
    "o1-preview": 128_000,
    "o3": 200_000,
    "o4": 200_000,
    # Anthropic (every Claude since 2.1; the 1M-token beta is opt-in, configure it on the route)
    "claude-": 200_000,
    "claude-2.0": 100_000,
    "claude-instant": 100_000,
    # Google
    "gemini-3": 1_048_576,
    "gemini-2.5": 1_048_576,
    "gemini-2.0-flash": 1_048_576,
    "gemini-1.5-flash": 1_048_576,
    "gemini-1.5-pro": 2_097_152,
    # Others
    "deepseek-": 128_000,
    "llama-3": 128_000,
    "llama-3-": 8_192,  # the original Llama 3 (8B/70B); 3.1 and later have 128K
    "llama3-": 8_192,
    "mistral-": 128_000,
    "mistral-7b": 32_768,
    "open-mistral-7b": 32_768,
    "open-mistral-nemo": 128_000,
    "ministral-": 128_000,
    "codestral": 256_000,
    "pixtral": 128_000,
    "command-r": 128_000,
    "grok-3": 131_072,
    "grok-4": 256_000,
}

# Every model an Anthropic endpoint serves today has at least this window.
PROVIDER_DEFAULTS: dict[str, int] = {"anthropic": 200_000}

_BEDROCK_PREFIX = re.compile(r"^(?:[a-z]{2}\.)?(?:anthropic|meta|mistral|cohere|deepseek|openai)\.")
_BY_LENGTH = sorted(KNOWN_WINDOWS, key=len, reverse=True)


def known_window(provider_type: str, model: str) -> int | None:
    """The table's window for ``model`` (longest prefix wins), else the provider's default, else None."""
    base = model.strip().lower().rsplit("/", 1)[-1]
    base = _BEDROCK_PREFIX.sub("", base)
    for prefix in _BY_LENGTH:
        if base.startswith(prefix):
            return KNOWN_WINDOWS[prefix]
    return PROVIDER_DEFAULTS.get(provider_type)


def context_window(route_window: int | None, provider_type: str, model: str) -> int:
    """The window to plan with: the route's configured one if given, else the table, else ``DEFAULT_WINDOW``."""
    if route_window:
        return route_window
    return known_window(provider_type, model) or DEFAULT_WINDOW


def effective_window(route_window: int | None, provider_type: str, model: str) -> int:
    """The window one target really has: the route's, but never more than the table knows for the model.

    A route configured for 1M tokens whose fallback is gpt-4o must not send gpt-4o 1M tokens.
    """
    known = known_window(provider_type, model)
    if route_window and known:
        return min(route_window, known)
    return route_window or known or DEFAULT_WINDOW
