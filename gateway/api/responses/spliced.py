"""Large Responses stream frames, written a slice at a time.

A message's closing events (``response.output_text.done``, ``response.content_part.done``,
``response.output_item.done``) each carry its whole text, and the terminal event carries the whole
Response. For a text near ``max_response_bytes`` (32 MiB by default), building those frames and
joining them into one write held about fourteen copies of the text at once (issue 45: 450 MB for
one 32 MiB answer). Past ``LARGE_CHARS`` such frames are generators instead: the frame is
encoded with a raw NUL byte where each large text goes (``MARK``; orjson never writes one of its
own, it escapes control characters in strings), and the text is JSON-encoded again slice by slice
as the body writes it. The gateway then holds the text once plus one slice; the bytes on the
wire are the same (JSON escapes each character on its own, so the slices' encodings joined are
the whole text's).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import orjson

#: texts up to this many characters are framed whole (the hot path's byte templates)
LARGE_CHARS = 256 * 1024
#: characters encoded per write of a large frame (at most 1.5 MiB of JSON: six bytes per escaped character)
SLICE_CHARS = 256 * 1024
#: what stands for a large text in a frame's JSON until it is spliced in
MARK = orjson.Fragment(b"\x00")
NUL = b"\x00"


def spliced(template: bytes, texts: list[str]) -> Iterator[bytes]:
    """``template`` with each ``MARK`` replaced by the next text's JSON string, in slices."""
    segments = template.split(NUL)
    if len(segments) != len(texts) + 1:
        raise ValueError(f"a spliced frame has {len(segments) - 1} marks for {len(texts)} texts")
    if not texts:
        yield template
        return
    pending = segments[0] + b'"'
    last = len(texts) - 1
    for index, text in enumerate(texts):
        for start in range(0, len(text), SLICE_CHARS):
            yield pending + orjson.dumps(text[start:start + SLICE_CHARS])[1:-1]
            pending = b""
        pending += b'"' + segments[index + 1] + (b'"' if index < last else b"")
    yield pending


def marked(item: dict[str, Any], texts: list[str]) -> dict[str, Any]:
    """An output item for encoding, its large text (a message's or a reasoning summary's) as ``MARK``.

    The text goes to ``texts``, in the order the marks are encoded; a small one stays in the item.
    """
    kind = item.get("type")
    key = "content" if kind == "message" else "summary" if kind == "reasoning" else ""
    parts = item.get(key)
    if not parts or len(parts[0].get("text") or "") <= LARGE_CHARS:
        return item
    texts.append(parts[0]["text"])
    return {**item, key: [{**parts[0], "text": MARK}, *parts[1:]]}


def frames_body(batch: list[Any]) -> bytes | Iterator[bytes]:
    """A ``frames`` builder's batch as the SSE body writes it: one write, or (a large frame in it) one per slice."""
    try:
        return b"".join(batch)
    except TypeError:  # a generator among the frames: never on the hot path's small answers
        return _pieces(batch)


def _pieces(batch: Iterable[bytes | Iterator[bytes]]) -> Iterator[bytes]:
    pending = b""
    for frame in batch:
        if isinstance(frame, bytes):
            pending += frame
            continue
        for piece in frame:
            yield pending + piece if pending else piece
            pending = b""
    if pending:
        yield pending
