"""Log lines a caller cannot forge and that carry no configured secret.

Caller text (a model name, a tool name, an upstream's error) reaches log messages. A line
break in it would start what looks like a new record (``\\n2026-01-01 ... ERROR ...``), so the
formatter escapes every control character in the rendered message (C0, DEL, C1 and the Unicode
line/paragraph separators): one record is one line. A traceback keeps its line breaks (it is
unreadable without them) but every line after its first is indented, so no text inside it can
pass for the start of a record; its other control characters are escaped too. Everything the
formatter writes goes through ``redact.scrub`` last.
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

    Fields: ``ts`` (ISO 8601 UTC), ``level``, ``logger``, ``pid`` (the worker), ``message``, ``exc`` (a traceback) and,
    for an access record, its fields at the top level. Text goes through ``redact.scrub``; JSON
    escaping already keeps a record on one line.
    """

    _second = -1
    _prefix = ""

    def format(self, record: logging.LogRecord) -> str:
        created = record.created
        second = int(created)
        if second != self._second:  # one strftime per second, not per record
            self._second, self._prefix = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        entry: dict[str, Any] = {
            "ts": f"{self._prefix}.{int((created - second) * 1000):03d}Z",
            "level": record.levelname.lower(), "logger": record.name, "pid": record.process,
        }
        args = record.args
        fields = getattr(args[0], "fields", None) if isinstance(args, tuple) and len(args) == 1 else None
        if fields is not None:  # an access record (gateway.api.exchange.AccessLine)
            entry["message"] = "access"
            entry.update(fields)
        else:
            entry["message"] = redact.scrub(record.getMessage())
        if record.exc_info:
            entry["exc"] = redact.scrub(self.formatException(record.exc_info))
        if record.stack_info:
            entry["stack"] = redact.scrub(self.formatStack(record.stack_info))
        return orjson.dumps(entry, default=str).decode()


def configure(level: str, kind: str = "text", access: bool = False) -> None:
    """Root logging for ``loopgate serve`` (and each worker process): one safe handler on stderr."""
    from gateway.api import exchange  # the access switch lives beside the one place that writes records

    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if kind == "json" else SafeFormatter(FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Neither format shows thread or process names: LogRecord need not look them up for every record.
    logging.logThreads = False
    logging.logMultiprocessing = False
    exchange.ACCESS = access and logging.getLogger("loopgate.access").isEnabledFor(logging.INFO)
