"""Thinking-block signatures the gateway issues for reasoning that no Anthropic model produced.

A Messages caller gets a target's reasoning as a ``thinking`` block, and Anthropic's SDKs and
Claude Code expect every such block to carry a ``signature`` (they send it back with the turn).
Reasoning from an OpenAI-format or Gemini target has none, so the gateway issues one: a prefix
that no Anthropic signature can start with (``.`` is not a base64 character) and a digest of the
text. When a block comes back, the prefix says it is the gateway's, so it becomes
``reasoning_content`` again and never reaches Anthropic, which would reject the signature. The
digest is not a secret (it protects nothing a caller could not send as plain reasoning): it tells
an edited block from an intact one, and an edited one is dropped rather than passed on as reasoning.
"""

from __future__ import annotations

import base64
import hashlib

PREFIX = "loopgate.v1."


def _digest(text: str) -> str:
    raw = hashlib.blake2b(text.encode(), digest_size=18, person=b"loopgate-think").digest()
    return base64.urlsafe_b64encode(raw).decode("ascii")


def issue(thinking: str) -> str:
    """The signature of a reasoning block the gateway renders from a non-Anthropic answer."""
    return PREFIX + _digest(thinking)


def is_ours(signature: object) -> bool:
    return isinstance(signature, str) and signature.startswith(PREFIX)


def intact(thinking: str, signature: str) -> bool:
    """True when ``signature`` is the one the gateway issued for exactly this text."""
    return signature == PREFIX + _digest(thinking)
