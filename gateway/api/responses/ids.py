"""The ids of a Response and of its items: random, never enumerable, and the same again when the same events
are rendered twice (a resume's stored result, ``render.ResponseRecorder``)."""

from __future__ import annotations

import itertools

from gateway.random_ids import random_hex


def new_id(kind: str) -> str:
    """An item id: 96 random bits (batched CSPRNG, no system call per item)."""
    return kind + "_" + random_hex(12)


def item_ids() -> tuple[str, itertools.count[int]]:
    """One response's item ids: a random base (80 bits) and a counter, so a second builder fed the same
    events (a resume's stored result, ``ResponseRecorder``) names the items exactly as the first did."""
    return "_" + random_hex(10), itertools.count()


def response_id() -> str:
    """192 random bits: ids cannot be enumerated from one seen (a stored response is also bound to its tenant)."""
    return "resp_" + random_hex(24)


def server_label(source: str) -> str:
    """The ``server_label`` of a tool from its source name: the MCP server's name, or ``loopgate``."""
    return source[4:] if source.startswith("mcp:") else "loopgate"
