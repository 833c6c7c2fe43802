"""Incremental Server-Sent Events decoding over raw bytes.

All three providers stream SSE, with different line endings (Gemini sends ``\\r\\n``). The
decoder works on bytes and hands ``data`` to orjson as bytes, so no text is decoded twice.

Bounded: a line, or one event's data, past ``MAX_EVENT_BYTES`` fails the stream as an
``invalid_response`` (a provider's events are a few KiB; an endless line is not an event). The
whole stream is bounded by the provider's ``max_response_bytes`` in the transport.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.upstream.errors import ErrorClass, ProviderError

MAX_EVENT_BYTES = 4 * 1024 * 1024


@dataclass(slots=True)
class SSEEvent:
    event: str | None
    data: bytes


class SSEDecoder:
    __slots__ = ("_buffer", "_data", "_event", "_size")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []
        self._event: str | None = None
        self._size = 0  # of the event's data so far

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        buffer = self._buffer + chunk if self._buffer else chunk
        lines = buffer.splitlines(keepends=True)
        if not lines:
            self._buffer = b""
            return []
        last = lines[-1]
        # An unterminated last line, or a lone trailing "\r" whose "\n" may still be on its way.
        if not last.endswith((b"\n", b"\r")) or last.endswith(b"\r"):
            self._buffer = lines.pop()
            if len(self._buffer) > MAX_EVENT_BYTES:
                self._buffer = b""
                raise _too_large()
        else:
            self._buffer = b""
        events: list[SSEEvent] = []
        for raw in lines:
            line = raw.rstrip(b"\r\n")
            self._line(line, events)
        return events

    def close(self) -> list[SSEEvent]:
        """Flush at end of body: a final event without its blank line still counts."""
        events: list[SSEEvent] = []
        if self._buffer:
            self._line(self._buffer.rstrip(b"\r\n"), events)
            self._buffer = b""
        self._line(b"", events)
        return events

    def _line(self, line: bytes, events: list[SSEEvent]) -> None:
        if not line:
            if self._data:
                events.append(SSEEvent(self._event, b"\n".join(self._data)))
            self._data = []
            self._event = None
            self._size = 0
            return
        if line[0] == 0x3A:  # ":" comment / keep-alive
            return
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._size += len(value) + 1
            if self._size > MAX_EVENT_BYTES:
                raise _too_large()
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")


def _too_large() -> ProviderError:
    return ProviderError(ErrorClass.INVALID_RESPONSE,
                         f"upstream sent a stream event larger than {MAX_EVENT_BYTES} bytes")
