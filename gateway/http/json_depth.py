"""How deep JSON may nest, wherever the gateway parses it (caller bodies, tool arguments, upstream answers).

orjson parses up to 1,024 levels but serialises only up to 254, and every request the gateway
builds wraps the values it carries a few levels deeper (an Anthropic ``tool_use.input`` sits six
levels down). A value parsed at any depth could then fail at its next serialisation, far from
where it came in, as a 500. So every parse refuses more than :data:`MAX_DEPTH` levels (200: room
for the wrapping, and no real request or answer comes near it), and each caller says whose fault
that is: a 400 for a caller's JSON, an invalid answer (failover) for an upstream's, an error
result for a model's tool arguments.
"""

from __future__ import annotations

from typing import Any

import orjson

MAX_DEPTH = 200


class JSONTooDeep(orjson.JSONDecodeError):
    """JSON nested deeper than :data:`MAX_DEPTH`: a ``JSONDecodeError``, so every parser's handler already knows it."""

    def __init__(self, doc: str) -> None:
        super().__init__(f"nested deeper than {MAX_DEPTH} levels", doc, 0)


def too_deep(value: Any) -> bool:
    """Is any value nested deeper than MAX_DEPTH? Iterative: the depth is what is in question."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values() if isinstance(child, (dict, list)))
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item if isinstance(child, (dict, list)))
    return False


#: Text shorter than this cannot nest past MAX_DEPTH (it needs that many brackets, opened and closed):
#: a stream chunk, the most frequent parse, is checked with one ``len``.
MIN_TOO_DEEP_CHARS = 2 * (MAX_DEPTH + 1)


def loads(raw: bytes | bytearray | memoryview | str) -> Any:
    """``orjson.loads`` that raises :class:`JSONTooDeep` past :data:`MAX_DEPTH` levels.

    Only text long enough, with more brackets than the limit, can nest that deep: a length check
    and then one C-speed count skip the walk for everything else (every ordinary request and answer).
    """
    value = orjson.loads(raw)
    if len(raw) < MIN_TOO_DEEP_CHARS or not isinstance(value, (dict, list)):
        return value
    if isinstance(raw, str):
        brackets = raw.count("[") + raw.count("{")
    else:
        data = bytes(raw) if isinstance(raw, memoryview) else raw
        brackets = data.count(b"[") + data.count(b"{")
    if brackets > MAX_DEPTH and too_deep(value):
        raise JSONTooDeep(raw if isinstance(raw, str) else "")
    return value
