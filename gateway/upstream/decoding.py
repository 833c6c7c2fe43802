"""Content-Encoding of upstream response bodies: gzip, and deflate zlib-wrapped or raw.

Bounded: a decoder never returns more than the caller's remaining budget (a small body that
inflates to gigabytes stops at the limit, with memory held to it). Checked whole: a body that
ends before its compressed stream does is truncated, never taken as complete. Corrupt data is
an ``invalid_response``, never a ``zlib.error``.
"""

from __future__ import annotations

import zlib

from gateway.upstream.errors import ErrorClass, ProviderError, ResponseTooLarge


class BodyDecoder:
    """One response body's decompressor."""

    __slots__ = ("_fed", "_head", "_zlib")

    def __init__(self, wbits: int | None) -> None:
        # ``None``: "deflate", whose framing is chosen from its first two bytes (RFC 9110 means
        # zlib-wrapped, but servers send raw deflate too, and browsers accept both).
        self._zlib = zlib.decompressobj(wbits) if wbits is not None else None
        self._head = b""
        self._fed = False  # an empty body (a 204 that names an encoding) compressed nothing

    def decode(self, data: bytes, limit: int) -> bytes:
        """The decompressed bytes of ``data``; more than ``limit`` of them is an error."""
        self._fed = True
        inflater = self._zlib
        if inflater is None:
            data = self._head + data
            if len(data) < 2:
                self._head = data
                return b""
            self._head = b""
            inflater = self._zlib = zlib.decompressobj(zlib.MAX_WBITS if _zlib_header(data) else -zlib.MAX_WBITS)
        try:
            out = inflater.decompress(data, limit + 1)  # max_length: never inflate past the budget
        except zlib.error as exc:
            raise _corrupt(exc) from None
        if len(out) > limit:
            raise too_large()
        return out

    def finish(self, limit: int) -> bytes:
        """The last decompressed bytes, once the body ended; a compressed stream that did not end is an error."""
        if not self._fed:
            return b""
        inflater = self._zlib
        if inflater is None:
            raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream sent a truncated compressed body")
        try:
            tail = inflater.flush()
        except zlib.error as exc:
            raise _corrupt(exc) from None
        if len(tail) > limit:
            raise too_large()
        if not inflater.eof:
            raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream sent a truncated compressed body")
        return tail


def _zlib_header(data: bytes) -> bool:
    """RFC 1950: method 8 (deflate), a window of at most 32 KiB, and a header check of 31."""
    cmf, flg = data[0], data[1]
    return cmf & 0x0F == 8 and cmf >> 4 <= 7 and (cmf << 8 | flg) % 31 == 0


def decoder_for(value: bytes) -> BodyDecoder | None:
    coding = value.strip().lower()
    if coding in (b"", b"identity"):
        return None
    if coding in (b"gzip", b"x-gzip"):
        return BodyDecoder(16 + zlib.MAX_WBITS)
    if coding == b"deflate":
        return BodyDecoder(None)
    raise ProviderError(ErrorClass.INVALID_RESPONSE, f"upstream used an unsupported Content-Encoding: {coding!r}")


def _corrupt(exc: zlib.error) -> ProviderError:
    return ProviderError(ErrorClass.INVALID_RESPONSE, f"upstream sent a corrupt compressed body: {exc}")


def too_large() -> ProviderError:
    return ResponseTooLarge("upstream response is larger than max_response_bytes")
