"""Captured content on spans (``capture_content: true``), bounded per attribute.

A prompt, an answer, a tool's arguments or its result can each be megabytes (an answer up to its
provider's ``max_response_bytes``, 32 MiB by default). Kept whole, each was copied into the
request's trace entry and held in the shipper's buffer, which is bounded in spans, not bytes
(issue 45); past ``max_frame_bytes`` the request's spans were dropped whole. So each captured
attribute is cut to ``MAX_CAPTURED_BYTES`` of UTF-8, ending with ``CUT`` (a trace is for reading
what happened, not a copy of the conversation).
"""

from __future__ import annotations

from typing import Any

import orjson

#: the most bytes (UTF-8) of one captured attribute, the cut marker included
MAX_CAPTURED_BYTES = 64 * 1024
#: what ends a cut attribute
CUT = " …[cut by loopgate: longer than 64 KiB]"
_KEEP = MAX_CAPTURED_BYTES - len(CUT.encode())
_SHORT = MAX_CAPTURED_BYTES // 4  # a text of at most this many characters fits whatever they are


def captured(text: str) -> str:
    """``text``, or its first bytes and ``CUT`` when its UTF-8 is longer than ``MAX_CAPTURED_BYTES``."""
    if len(text) <= _SHORT:
        return text
    head = text[:MAX_CAPTURED_BYTES].encode("utf-8", "replace")  # at most 256 KiB, however long the text
    if len(text) <= MAX_CAPTURED_BYTES and len(head) <= MAX_CAPTURED_BYTES:
        return text
    return head[:_KEEP].decode("utf-8", "ignore") + CUT


def captured_json(value: Any) -> str:
    """``value`` as JSON text (what ``gen_ai.*.messages`` hold), cut like ``captured``.

    Long strings inside are shortened before encoding, so a 32 MiB answer is not encoded whole to
    keep 64 KiB of it.
    """
    encoded = orjson.dumps(_shortened(value), default=str)
    if len(encoded) <= MAX_CAPTURED_BYTES:
        return encoded.decode()
    return encoded[:_KEEP].decode("utf-8", "ignore") + CUT


def _shortened(value: Any) -> Any:
    """``value`` with every string past ``MAX_CAPTURED_BYTES`` characters cut there (the rest is cut anyway)."""
    if isinstance(value, str):
        return value[:MAX_CAPTURED_BYTES] if len(value) > MAX_CAPTURED_BYTES else value
    if isinstance(value, dict):
        return {key: _shortened(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_shortened(item) for item in value]
    return value
