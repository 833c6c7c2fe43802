"""Incremental Server-Sent Events decoding over raw bytes.

All three providers stream SSE, with different line endings (Gemini sends ``\\r\\n``). The
decoder works on bytes and hands ``data`` to orjson as bytes, so no text is decoded twice.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class SSEEvent:
    event: str | None
    data: bytes


class SSEDecoder:
    __slots__ = ("_buffer", "_data", "_event")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []
        self._event: str | None = None

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
            return
        if line[0] == 0x3A:  # ":" comment / keep-alive
            return
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
