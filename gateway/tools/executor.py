"""Run tool calls: parse, validate, time-limit, and turn every failure into a result.

The contract with the loop is simple: ``run_tool`` always returns a :class:`ToolOutcome`.
Bad arguments, HTTP errors, exceptions in a tool, timeouts and even bugs in a source become
an ``error`` outcome whose content tells the model what went wrong, so it can correct itself
and the caller never sees a tool's exception. Only cancellation propagates: it means the
request itself is going away, and swallowing it would keep a dead request's work running.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

import orjson
from jsonschema.exceptions import ValidationError
from referencing.exceptions import Unresolvable

from gateway import redact
from gateway.canonical import JSONTooDeep, load_json
from gateway.tools.base import ToolFailure, ToolOutcome
from gateway.tools.interaction import CALL_INTERACTIONS, CALL_PROGRESS, CallInteractions
from gateway.tools.registry import RegisteredTool

log = logging.getLogger("loopgate.tools")

_EXCERPT_CHARS = 200
_MAX_VIOLATIONS = 10
_MAX_MESSAGE_CHARS = 300


async def run_tool(tool: RegisteredTool, arguments_json: str) -> ToolOutcome:
    """Execute one call of ``tool`` with the model's raw ``arguments`` string. Never raises
    (except ``asyncio.CancelledError``)."""
    start = time.perf_counter()
    name = tool.spec.name
    arguments = _parse(name, arguments_json)
    if isinstance(arguments, str):
        return ToolOutcome("error", arguments, _ms_since(start))
    problem = _violations(tool, arguments)
    if problem is not None:
        return ToolOutcome("error", problem, _ms_since(start))
    timeout = asyncio.timeout(tool.spec.timeout_s)
    # What the running call may ask of its request: progress (the loop's handler for this call), and a user's
    # input or a model's answer (the loop's handlers, set for this call's task). A person's answer or a model's
    # is not the tool's time: its clock stops while they are awaited.
    asked = CALL_INTERACTIONS.get() or CallInteractions()
    interactions = CALL_INTERACTIONS.set(replace(
        asked, progress=CALL_PROGRESS.get(), elicit=_clock_stopped(timeout, asked.elicit),
        sample=_clock_stopped(timeout, asked.sample)))
    try:
        async with timeout:
            content = await tool.source.call(name, arguments)
    except ToolFailure as exc:
        return ToolOutcome("error", redact.scrub(exc.message), _ms_since(start))
    except Exception as exc:
        # Our own deadline surfaces as TimeoutError; a TimeoutError the source raised itself
        # (its own client timeout) is not ours to describe as "timed out after Ns".
        if isinstance(exc, TimeoutError) and timeout.expired():
            return ToolOutcome("error", f"Tool {name} timed out after {tool.spec.timeout_s:g}s", _ms_since(start))
        log.exception("tool %s (source %s) failed unexpectedly", name, tool.spec.source)
        detail = _clip(redact.scrub(f"{type(exc).__name__}: {exc}"), _MAX_MESSAGE_CHARS)
        return ToolOutcome("error", f"Tool {name} failed with an internal error ({detail})", _ms_since(start))
    finally:
        CALL_INTERACTIONS.reset(interactions)
    elapsed = _ms_since(start)
    log.debug("tool %s ok in %.1f ms", name, elapsed)
    # A tool server may echo the request (its bearer token included): the model and the caller see the result.
    if isinstance(content, str):
        return ToolOutcome("ok", redact.scrub(content), elapsed)
    parts = [{**part, "text": redact.scrub(part["text"])} if part.get("type") == "text" else part
             for part in content.parts]
    return ToolOutcome("ok", redact.scrub(content.text), elapsed, parts)


_Q = TypeVar("_Q")
_A = TypeVar("_A")


def _clock_stopped(timeout: asyncio.Timeout,
                   handler: Callable[[_Q], Awaitable[_A]] | None) -> Callable[[_Q], Awaitable[_A]] | None:
    """``handler`` with the call's deadline moved on by the time it takes (an elicitation waits for a person,
    bounded by its own ``elicitation_timeout_s``; a sampling request by the request's deadline)."""
    if handler is None:
        return None

    async def stopped(question: _Q) -> _A:
        loop = asyncio.get_running_loop()
        began = loop.time()
        when = timeout.when()
        timeout.reschedule(None)
        try:
            return await handler(question)
        finally:
            if when is not None and not timeout.expired():
                timeout.reschedule(when + (loop.time() - began))

    return stopped


def _parse(name: str, arguments_json: str) -> dict[str, Any] | str:
    """The arguments object, or (a str) a message for the model saying why there is none."""
    if not arguments_json.strip():
        return {}  # the canonical convention: no arguments means "{}"
    try:
        value = load_json(arguments_json)
    except JSONTooDeep as exc:
        return f"The arguments for {name} are {exc.msg}; send flatter arguments."
    except orjson.JSONDecodeError as exc:
        excerpt = _clip(arguments_json, _EXCERPT_CHARS)
        return f"The arguments for {name} were not valid JSON ({exc}). Received: {excerpt}"
    if not isinstance(value, dict):
        return f"Invalid arguments for {name}: expected a JSON object, got {_json_type(value)}"
    return value


def _violations(tool: RegisteredTool, arguments: dict[str, Any]) -> str | None:
    """Every schema violation with its JSON path, or None when the arguments are valid.

    A reference the schema cannot resolve by itself is never fetched (``json_schemas.LOCAL_ONLY``):
    the call fails with an error result instead of being run unchecked."""
    try:
        errors = sorted(tool.validator.iter_errors(arguments), key=_error_order)
    except Unresolvable as exc:
        ref = _clip(str(getattr(exc, "ref", "")), _MAX_MESSAGE_CHARS)
        return (f"{tool.spec.name} cannot be called: its input schema refers to {ref!r}, which is not part of the "
                "schema (only local references are followed)")
    if not errors:
        return None
    lines = [_describe(e) for e in errors[:_MAX_VIOLATIONS]]
    if len(errors) > _MAX_VIOLATIONS:
        lines.append(f"... and {len(errors) - _MAX_VIOLATIONS} more")
    return f"Invalid arguments for {tool.spec.name}: " + "; ".join(lines)


def _describe(error: ValidationError) -> str:
    message = _clip(error.message, _MAX_MESSAGE_CHARS)
    path = error.json_path
    return message if path == "$" else f"{path}: {message}"


def _error_order(error: ValidationError) -> tuple[list[str], str]:
    return [str(p) for p in error.absolute_path], error.message


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def _clip(text: str, limit: int) -> str:
    """At most ``limit`` characters, always valid UTF-8 (a lone surrogate would break the transcript's JSON)."""
    clipped = text if len(text) <= limit else text[:limit] + "…"
    return clipped.encode("utf-8", "replace").decode("utf-8")


def _ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0
