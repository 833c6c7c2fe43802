"""Encoding caller text with tiktoken so that no text can make the encoder raise out of the request.

Why: tiktoken splits text with a backtracking regex (fancy-regex) whose stack is capped at a
million entries, and o200k_base's ``\\s+(?!\\S)`` pushes one entry per character of a whitespace
run. A run of 999,999 spaces, tabs, U+3000 or any other whitespace (measured, tiktoken 0.14)
overflows it; the Rust code then panics, prints the panic (a full backtrace with
``RUST_BACKTRACE`` set) to stderr, and pyo3 raises ``PanicException``, a ``BaseException`` that
no ``except Exception`` catches. o200k is the encoding of every default model, and callers
control the whitespace of every prompt and every tool result they make a tool return.

Two levels:

1. Text that holds a whitespace run of :data:`RUN_LIMIT` characters or more is encoded in
   parts: each such run cut into pieces of :data:`RUN_PIECE` characters, each piece encoded on
   its own, so the encoder is never fed a long run and never panics on one (no stderr noise
   either). The pieces' tokens decode to the same text; the count moves by at most a token at
   each cut (a run is tokens of up to 128 spaces or 16 tabs: cut every 4,096 characters, 500K
   spaces are 3,907 tokens, as whole). Text past :data:`SEGMENT` characters is also encoded in
   segments cut before a word (no token changes: ``_segments``), so no one call holds the GIL
   long. Text below :data:`RUN_LIMIT` (every ordinary prompt) is one encoder call, as before;
   finding the runs costs a strided probe of the text (a run of ``RUN_LIMIT`` characters holds
   two consecutive probes ``RUN_PIECE`` apart), then a scan only around two whitespace probes in
   a row.
2. Whatever the encoder still raises that is not an exit of the task or process
   (:data:`gateway.cancellation.EXITS`) is logged and answered conservatively: a count becomes
   the text's UTF-8 size, an upper bound (a token covers at least one byte), so a limit judged
   on it can refuse too much but never lets too much through; tokens are then made from fixed
   pieces of ``RUN_PIECE`` characters.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import tiktoken

from gateway.cancellation import EXITS

log = logging.getLogger("loopgate.context")

#: a long whitespace run is encoded in pieces of this many characters
RUN_PIECE = 4096
#: whitespace runs this long or longer are cut into pieces (text shorter than this: one call, no probe)
RUN_LIMIT = 2 * RUN_PIECE
#: text past this many characters is encoded in parts of about this size (see ``_segments``)
SEGMENT = 65_536

# Python's ``\s`` (str.isspace) holds every character of Rust's ``\s`` (Unicode White_Space), so
# every run the encoder's regex sees lies inside a run found here.
_SPACES = re.compile(r"\s+")
_PROBED_RUN = re.compile(r"\s{2,}")


def _long_runs(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of the whitespace runs of at least ``RUN_LIMIT`` characters, in order.

    Such a run holds two consecutive multiples of ``RUN_PIECE``, so only around two consecutive
    whitespace probes is the text itself scanned: from the whitespace just before the first (at
    most ``RUN_PIECE`` back, the probe before is not whitespace) to the end of the run of the
    last. Those stretches do not overlap: the scans are linear in the text in all.
    """
    probes = text[::RUN_PIECE]
    for found in _PROBED_RUN.finditer(probes):
        first = found.start() * RUN_PIECE
        before = _SPACES.match(text[max(0, first - RUN_PIECE):first][::-1])
        start = first - (before.end() if before is not None else 0)
        end = _SPACES.match(text, (found.end() - 1) * RUN_PIECE).end()  # type: ignore[union-attr]
        for run in _SPACES.finditer(text, start, end):  # probes in a row may sit in different runs
            if run.end() - run.start() >= RUN_LIMIT:
                yield run.start(), run.end()


def _word_start(text: str, low: int, high: int) -> int:
    """A lone space in ``text[low:high]`` between two non-spaces (where every pre-token of the
    encoders' patterns begins anew, so cutting before it changes no token), else ``high``."""
    at = text.find(" ", low, high)
    while at != -1:
        if not text[at - 1].isspace() and at + 1 < len(text) and not text[at + 1].isspace():
            return at
        at = text.find(" ", at + 1, high)
    return high


def _segments(text: str, start: int, end: int) -> Iterator[str]:
    """``text[start:end]`` in parts of about :data:`SEGMENT` characters, cut before a word.

    tiktoken releases the GIL while it encodes but holds it while it builds the Python list of the
    tokens: 12 MB in one call held it 0.3-0.5 s, stalling the event loop while a worker thread
    counted. A segment's list takes about a millisecond. Where no word starts within
    ``RUN_PIECE`` characters of a segment's end (a blob without spaces), the cut falls there and
    the count may move by one token.
    """
    while end - start > SEGMENT:
        cut = _word_start(text, start + SEGMENT, min(end, start + SEGMENT + RUN_PIECE))
        yield text[start:cut]
        start = cut
    if end > start:
        yield text[start:end]


def _pieces(text: str) -> Iterator[str]:
    """``text`` in the parts level 1 encodes one by one (the whole text when it has no long run)."""
    if len(text) < RUN_LIMIT:
        yield text
        return
    done = 0
    for start, end in _long_runs(text):
        yield from _segments(text, done, start)
        for cut in range(start, end, RUN_PIECE):
            yield text[cut:min(end, cut + RUN_PIECE)]
        done = end
    yield from _segments(text, done, len(text))


def _encode_parts(encoding: tiktoken.Encoding, text: str) -> list[int]:
    if len(text) < RUN_LIMIT:
        return encoding.encode_ordinary(text)
    tokens: list[int] = []
    for piece in _pieces(text):
        tokens += encoding.encode_ordinary(piece)
    return tokens


def _failed(exc: BaseException, text: str, what: str) -> None:
    if isinstance(exc, EXITS):
        raise exc
    # The type only: the message of a panic names no caller text, but an unknown failure might.
    log.warning("tiktoken failed on a text of %d characters (%s); %s", len(text), type(exc).__name__, what)


def encode(encoding: tiktoken.Encoding, text: str) -> list[int]:
    """The tokens of ``text`` (special-token strings count as plain text): never raises but an exit."""
    try:
        return _encode_parts(encoding, text)
    except BaseException as exc:  # a Rust panic is a BaseException
        _failed(exc, text, "encoded in fixed pieces")
    tokens: list[int] = []
    for cut in range(0, len(text), RUN_PIECE):
        tokens += encoding.encode_ordinary(text[cut:cut + RUN_PIECE])
    return tokens


def count(encoding: tiktoken.Encoding, text: str) -> int:
    """How many tokens ``text`` is: exact but at cut runs (level 1), its UTF-8 size if the encoder fails."""
    try:
        if len(text) < RUN_LIMIT:  # every ordinary text: one call, no further frame
            return len(encoding.encode_ordinary(text))
        return len(_encode_parts(encoding, text))
    except BaseException as exc:  # a Rust panic is a BaseException
        _failed(exc, text, "counted as its UTF-8 size")
    return len(text.encode("utf-8", "surrogatepass"))
