"""Feeding native SSE bytes through the decoder and an adapter's stream parser, whole or in pieces.

Every adapter's tests check the same property (a stream cut anywhere parses like the whole), so
the feeding lives here once.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from gateway.canonical import Answering, ModelResponse, StreamDelta
from gateway.providers.base import SSEEvent
from gateway.upstream.sse import SSEDecoder


def sse_events(data: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    return decoder.feed(data) + decoder.close()


def content(deltas: list[StreamDelta]) -> list[StreamDelta]:
    """The text and reasoning deltas, without the ``Answering`` marker that opens a stream's first batch."""
    return [delta for delta in deltas if not isinstance(delta, Answering)]


def parse_stream(adapter: Any, events: Iterable[SSEEvent]) -> tuple[ModelResponse, list[StreamDelta]]:
    parser = adapter.new_stream_parser()
    deltas: list[StreamDelta] = []
    for event in events:
        deltas.extend(parser.feed(event))
    return parser.finish(), content(deltas)


def parse_in_pieces(adapter: Any, data: bytes, bounds: list[int]) -> tuple[ModelResponse, list[StreamDelta]]:
    """Feed ``data`` cut at ``bounds`` (sorted, starting at 0 and ending at ``len(data)``)."""
    decoder = SSEDecoder()
    parser = adapter.new_stream_parser()
    deltas: list[StreamDelta] = []
    for start, end in itertools.pairwise(bounds):
        for event in decoder.feed(data[start:end]):
            deltas.extend(parser.feed(event))
    for event in decoder.close():
        deltas.extend(parser.feed(event))
    return parser.finish(), content(deltas)
