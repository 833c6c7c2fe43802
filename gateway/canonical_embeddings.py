"""The canonical embeddings request and answer: what the surface parses into and every adapter translates.

A vector travels as the upstream sent it: a list of floats (JSON numbers), or the base64 text of
little-endian float32 values (an upstream that answered ``encoding_format: base64``), checked
but not decoded (``checked_base64``); ``bytes`` (packed float32) is the form of an in-process
conversion. Converting happens once, in the renderer, and only when the caller asked for the
other form: a base64 answer to a base64 caller (the ``openai`` SDK's default) is passed through
without a byte decoded (decoding 100 vectors of 1536 dimensions costs ~1.5 ms, bench/README.md).
The length of every form is known without converting (``dimensions_of``).
"""

from __future__ import annotations

import array
import base64
import sys
from dataclasses import dataclass

#: one embedding: floats, base64 text of little-endian float32 values, or those values packed
Vector = list[float] | str | bytes

#: what is left of valid base64 text once every alphabet character is deleted: its padding
_BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

_LITTLE = sys.byteorder == "little"


@dataclass(frozen=True, slots=True)
class EmbeddingRequest:
    """``inputs``: strings, or token arrays (never mixed); ``texts``: the strings a target that takes no
    token ids is sent (the token arrays decoded; the strings themselves otherwise)."""

    inputs: list[str] | list[list[int]]
    texts: list[str]
    #: the caller's ``dimensions`` (models that can shorten their vectors), None: the model's own
    dimensions: int | None
    #: ``float`` or ``base64``: what is asked of the upstream (and given back to the caller)
    encoding_format: str
    user: str | None
    #: the input tokens counted before sending (the rate limit's estimate, the usage when the upstream reports none)
    counted_tokens: int

    @property
    def tokens(self) -> bool:
        """Whether ``inputs`` are token arrays."""
        return bool(self.inputs) and not isinstance(self.inputs[0], str)


@dataclass(slots=True)
class EmbeddingResult:
    """The vectors in input order, the prompt tokens the upstream reported (None: it reported none)."""

    vectors: list[Vector]
    prompt_tokens: int | None
    model: str = ""


def dimensions_of(vector: Vector) -> int:
    if isinstance(vector, str):
        return _base64_bytes(vector) // 4
    return len(vector) // 4 if isinstance(vector, bytes) else len(vector)


def _base64_bytes(text: str) -> int:
    return len(text) // 4 * 3 - (text[-2:].count("=") if text else 0)


def checked_base64(text: str) -> str | None:
    """``text`` when it is whole float32 values in base64 (padded, standard alphabet); None otherwise.

    Two C passes (an ASCII encode, a byte delete) instead of a decode: the vector is passed on as text.
    """
    if len(text) % 4:
        return None
    try:
        raw = text.encode("ascii")
    except UnicodeEncodeError:
        return None
    rest = raw.translate(None, _BASE64_ALPHABET)
    if rest not in (b"", b"=", b"==") or not raw.endswith(rest) or _base64_bytes(text) % 4:
        return None
    return text


def as_bytes(vector: str | bytes) -> bytes:
    """Packed float32 values of a base64 or packed vector."""
    return base64.b64decode(vector) if isinstance(vector, str) else vector


def pack(vector: list[float]) -> bytes:
    """Floats as little-endian float32 bytes (OpenAI's base64 encoding, before base64)."""
    packed = array.array("f", vector)
    if not _LITTLE:
        packed.byteswap()
    return packed.tobytes()


def unpack(raw: bytes) -> list[float]:
    """Little-endian float32 bytes as floats."""
    values = array.array("f")
    values.frombytes(raw)
    if not _LITTLE:
        values.byteswap()
    return values.tolist()
