"""Log lines a caller cannot forge and that carry no configured secret.

Caller text (a model name, a tool name, an upstream's error) reaches log messages. A line
break in it would start what looks like a new record (``\\n2026-01-01 ... ERROR ...``), so the
formatter escapes every control character in the rendered message (C0, DEL, C1 and the Unicode
line/paragraph separators): one record is one line. A traceback keeps its line breaks (it is
unreadable without them) but every line after its first is indented, so no text inside it can
pass for the start of a record; its other control characters are escaped too. Everything the
formatter writes goes through ``redact.scrub`` last.

The two formatters here are ``logging.format``'s two values (text, json); the handler that uses
them is installed by ``gateway/observability/startup.py``, and access records, which bypass
``logging``, are written by ``gateway/observability/access_log.py``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson

from gateway import redact

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _escapes(keep_newline: bool) -> dict[int, str]:
    table = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
    table.update({0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x2028: "\\u2028", 0x2029: "\\u2029"})
    if keep_newline:
        del table[0x0A]
    return table


_MESSAGE_ESCAPES = _escapes(keep_newline=False)
_TRACE_ESCAPES = _escapes(keep_newline=True)
TRACE_INDENT = "    "


def escape(text: str) -> str:
    """``text`` on one line: control characters as ``\\n``, ``\\r``, ``\\t``, ``\\xNN``."""
    return text.translate(_MESSAGE_ESCAPES)


class SafeFormatter(logging.Formatter):
    def formatMessage(self, record: logging.LogRecord) -> str:
        return redact.scrub(escape(super().formatMessage(record)))

    def formatException(self, ei: logging._SysExcInfoType) -> str:
        return _multiline(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _multiline(super().formatStack(stack_info))


def _multiline(text: str) -> str:
    return redact.scrub(text.translate(_TRACE_ESCAPES).replace("\n", "\n" + TRACE_INDENT))


class JsonFormatter(logging.Formatter):
    """``logging.format: json``: every record one JSON object on one line (uvicorn's own included).

    Fields: ``ts`` (ISO 8601 UTC), ``level``, ``logger``, ``pid`` (the worker), ``message`` and
    ``exc`` (a traceback). Text goes through ``redact.scrub``; JSON escaping already keeps a
    record on one line. Access records have the same fields plus their own (``access_log.AccessLog``).
    """

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": CLOCK.iso(record.created),
            "level": record.levelname.lower(), "logger": record.name, "pid": record.process,
        }
        entry["message"] = redact.scrub(record.getMessage())
        if record.exc_info:
            entry["exc"] = redact.scrub(self.formatException(record.exc_info))
        if record.stack_info:
            entry["stack"] = redact.scrub(self.formatStack(record.stack_info))
        return orjson.dumps(entry, default=str).decode()


class _Clock:
    """Timestamps with one ``strftime`` per second, not one per record."""

    def __init__(self) -> None:
        self._second = -1
        self._iso = self._text = ""

    def _at(self, second: int) -> None:
        self._second = second
        self._iso = time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(second))
        self._text = time.strftime("%Y-%m-%d %H:%M:%S,", time.localtime(second))

    def iso(self, created: float) -> str:
        """ISO 8601 UTC with milliseconds (JSON logs)."""
        second = int(created)
        if second != self._second:
            self._at(second)
        return self._iso + MILLIS[int((created - second) * 1000)] + "Z"

    def text(self, created: float) -> str:
        """``logging``'s default ``asctime`` (text logs)."""
        second = int(created)
        if second != self._second:
            self._at(second)
        return self._text + MILLIS[int((created - second) * 1000)]


#: the clock of every log line (and of the access records: ``gateway/observability/access_log.py``)
CLOCK = _Clock()
#: "000" to "999": the milliseconds of a timestamp without a format call per record
MILLIS = tuple(f"{ms:03d}" for ms in range(1000))
MILLIS_BYTES = tuple(ms.encode() for ms in MILLIS)
