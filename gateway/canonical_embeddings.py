"""The canonical embeddings request and answer: what the surface parses into and every adapter translates.

A vector travels as the upstream sent it: a list of floats (JSON numbers) or the raw bytes of
little-endian float32 values (an upstream that answered ``encoding_format: base64``). Converting
happens once, in the renderer, and only when the caller asked for the other form: a base64
answer to a base64 caller (the ``openai`` SDK's default) is passed through without a float
parsed. The length of either form is known without converting (``dimensions_of``).
"""

from __future__ import annotations

import array
import sys
from dataclasses import dataclass

#: one embedding: floats, or packed little-endian float32 bytes
Vector = list[float] | bytes

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
    return len(vector) // 4 if isinstance(vector, bytes) else len(vector)


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
