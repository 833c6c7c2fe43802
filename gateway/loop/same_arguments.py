"""Are the tool-call arguments a client sent back the ones the gateway stored? (resume way A's check)"""

from __future__ import annotations

from typing import Any

import orjson


def same_arguments(sent: Any, stored: Any) -> bool:
    """Are two tool-call argument strings the same call? Compared as parsed JSON, else as text.

    Clients re-serialise the assistant message they send back (compact separators, non-ASCII
    unescaped, keys reordered), so bytes differ for the very same call. When either side is not
    valid JSON there is no value to compare, and the text must match exactly.
    """
    sent = sent or "{}"
    stored = stored or "{}"
    if sent == stored:
        return True
    if not isinstance(sent, str) or not isinstance(stored, str):
        return False
    try:
        return _same_json(orjson.loads(sent), orjson.loads(stored))
    except orjson.JSONDecodeError:
        return False


def _same_json(left: Any, right: Any) -> bool:
    """JSON equality: key order is free, ``true`` is not ``1``, ``1.0`` is ``1`` (a JavaScript client writes 1).

    Iterative, so arguments nested as deep as the parser allows cannot exhaust the stack.
    """
    stack = [(left, right)]
    while stack:
        a, b = stack.pop()
        if isinstance(a, dict):
            if not isinstance(b, dict) or a.keys() != b.keys():
                return False
            stack.extend((value, b[key]) for key, value in a.items())
        elif isinstance(a, list):
            if not isinstance(b, list) or len(a) != len(b):
                return False
            stack.extend(zip(a, b, strict=True))
        elif isinstance(a, bool) or isinstance(b, bool):
            if a is not b:
                return False
        elif isinstance(b, (dict, list)) or a != b:
            return False
    return True
