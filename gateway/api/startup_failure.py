"""A start-up that fails says so in one line naming the config key, not in a squashed traceback.

The app's lifespan records what went wrong (``describe``); the lifespan's ``startup.failed``
message, which uvicorn logs as one record, is replaced by that line. ``loopgate serve --debug``
keeps the traceback.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from starlette.types import Message, Send

from gateway.config.checks import ConfigError
from gateway.tools.python_source import ToolTargetError

log = logging.getLogger("loopgate")

#: start-up errors that name a tool without a key: "tool 'x' (source 'python'): ..."
_TOOL = re.compile(r"^tool '([^']+)'")


def describe(exc: BaseException) -> str:
    """``KEY: problem`` for a config mistake found at start-up, else the exception's kind and text on one line."""
    if isinstance(exc, ToolTargetError):
        return f"{exc.key}: {exc.problem}"
    if isinstance(exc, ConfigError):
        return str(exc)
    text = " ".join(str(exc).split())
    tool = _TOOL.match(text)
    if tool is not None:
        return f"tools.{tool.group(1)}: {text}"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def one_line_startup_failure(send: Send, state: Any, debug: bool) -> Send:
    """``send`` for the lifespan scope: a ``startup.failed`` message carries ``state.startup_failure``'s line."""

    async def wrapped(message: Message) -> None:
        failure: BaseException | None = getattr(state, "startup_failure", None)
        if message["type"] == "lifespan.startup.failed" and failure is not None:
            line = f"start-up failed: {describe(failure)}"
            if debug:
                log.error(line, exc_info=failure)
                line = ""
            message = {**message, "message": line}
        await send(message)

    return wrapped
