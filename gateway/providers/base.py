"""What every wire-format adapter provides, and the canonical error classes the router acts on.

Adapters are pure translators: no I/O, no state beyond one stream's parser. The router does
the HTTP and hands the bytes to the adapter of the target that produced them, so a fallback
response can never be parsed by the wrong handler.
"""

from __future__ import annotations

import email.utils
import logging
import math
import re
import time
from collections.abc import AsyncGenerator, Mapping
from typing import Any, Protocol

import orjson

from gateway.canonical import JSONTooDeep, ModelRequest, ModelResponse, StreamDelta, Usage, load_json
from gateway.config.providers_section import ProviderConfig
from gateway.observability import metrics
from gateway.upstream.errors import RETRYABLE, TARGET_FAULTS, ErrorClass, ProviderError
from gateway.upstream.pool import UpstreamRequest
from gateway.upstream.sse import SSEEvent

log = logging.getLogger("loopgate.providers")

__all__ = ["MALFORMED", "RETRYABLE", "TARGET_FAULTS", "Adapter", "ErrorClass", "InProcessAdapter", "ProviderError",
           "SSEEvent", "StreamParser", "UpstreamRequest"]

# What reading a document of the wrong shape raises (a list where a dict was expected, a number
# where a string was, int("x"), int(inf)): each adapter entry point catches exactly these and turns
# them into INVALID_RESPONSE, so a wrong-shaped answer fails over instead of becoming a 500. A
# try block costs nothing on the well-formed path (Python >= 3.11).
MALFORMED = (TypeError, LookupError, AttributeError, ValueError, ArithmeticError)
# isinstance() with a tuple is cheaper than with ``str | None`` (the parse path runs per stream event).
STR_OR_NONE = (str, type(None))
DICT_OR_NONE = (dict, type(None))

# Retry-After beyond this is "not within any retry window" all the same; a larger value is capped to it.
MAX_RETRY_AFTER_S = 86_400.0
MAX_MODEL_NAME = 256
# An optional ``vendor/`` prefix (OpenRouter and other aggregators), then an OpenAI family that does not reason.
_NOT_REASONING = re.compile(r"(?:^|/)(?:gpt-4|gpt-3\.5|chatgpt-4o|gpt-5(?:\.\d+)?-chat)", re.IGNORECASE)


class StreamParser(Protocol):
    """Incremental parser for one native stream."""

    def feed(self, event: SSEEvent) -> list[StreamDelta]:
        """Consume one SSE event; return text/reasoning deltas. Raises ProviderError on an in-stream error.

        An event that is not JSON or has the wrong shape is skipped and counted (``MalformedEvents``);
        the first deltas of a stream are preceded by ``Answering`` (the model producing them).
        """
        ...

    def usage_so_far(self) -> Usage:
        """The usage the stream reported before it failed (a rescued stream bills its cut attempt too)."""
        ...

    def produced_so_far(self) -> str:
        """The text, reasoning and tool-call arguments the stream carried so far: a cut attempt that
        reported no usage (OpenAI's comes in the last chunk) is billed by an estimate of it."""
        ...

    def finish(self) -> ModelResponse:
        """The whole turn. Raises ProviderError(CONNECTION) when the stream ended before its end marker,
        and (INVALID_RESPONSE, ``MalformedEvents.check``) when events were skipped and nothing valid remains."""
        ...


class Adapter(Protocol):
    wire_format: str

    def build_request(self, request: ModelRequest, provider: ProviderConfig, model: str,
                      stream: bool) -> UpstreamRequest: ...

    def parse_response(self, body: bytes) -> ModelResponse: ...

    def new_stream_parser(self, target: str = "", model: str = "") -> StreamParser:
        """``target`` labels the malformed-event metric; ``model`` names the answer when the stream does not."""
        ...

    def parse_error(self, status: int, headers: Mapping[str, str], body: bytes) -> ProviderError: ...


class InProcessAdapter(Protocol):
    """An adapter that answers without the HTTP transport (a client library, the mock): the router calls it.

    ``in_process = True`` marks it; the router reads the flag once per target at start-up.
    """

    wire_format: str
    in_process: bool

    async def complete(self, request: ModelRequest, provider: ProviderConfig, model: str,
                       timeout: float) -> ModelResponse: ...

    def stream(self, request: ModelRequest, provider: ProviderConfig, model: str, timeout: float,
               label: str = "") -> AsyncGenerator[list[StreamDelta] | ModelResponse, None]:
        """Delta lists (the first starting with ``Answering``), then the whole turn as a ``ModelResponse``.

        ``label``: the target's metric label (bounded: ``PROVIDER:*`` for a direct route, whose
        model name the caller chose), for anything the adapter counts.
        """
        ...


# --- shared helpers ---------------------------------------------------------------------


def load_body(body: bytes) -> Any:
    """A 2xx body as JSON; anything else is the upstream's fault (retryable, not the caller's)."""
    try:
        return load_json(body)
    except JSONTooDeep as exc:
        raise ProviderError(ErrorClass.INVALID_RESPONSE, f"upstream returned a body {exc.msg}") from None
    except orjson.JSONDecodeError:
        raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream returned a body that is not JSON") from None


def load_error_body(body: bytes) -> Any:
    """An error body as JSON when it is JSON (proxies answer with HTML), else None."""
    try:
        return orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return None


_MEDIA_TYPE = re.compile(r"[A-Za-z0-9.+-]{1,40}/[A-Za-z0-9.+-]{1,60}")


def unreadable_error(status: int, headers: Mapping[str, str], body: bytes) -> ProviderError:
    """An error body the adapter cannot read (an HTML page, plain text, JSON of another shape).

    The client is told what came back, never the bytes: a proxy's page may quote the request,
    credentials included. The text still decides a context overflow, as a readable body would.
    """
    if not body:
        return error_from_status(status, headers, f"upstream returned HTTP {status}")
    kind = "a non-JSON body" if load_error_body(body) is None else "an error body of an unknown shape"
    media = _MEDIA_TYPE.match(headers.get("content-type", "").strip())
    described = (f"upstream answered {status} with {kind} "
                 f"({media.group() if media else 'no content type'}, {len(body)} bytes)")
    error = error_from_status(status, headers, described)
    if error.error_class is ErrorClass.BAD_REQUEST and looks_like_context_overflow(
            body[:2000].decode("utf-8", "replace")):
        error.error_class = ErrorClass.CONTEXT_LENGTH
    return error



def invalid_response(exc: BaseException) -> ProviderError:
    """A document of the wrong shape; the message names the kind of fault, never upstream text."""
    return ProviderError(ErrorClass.INVALID_RESPONSE,
                         f"upstream returned a response of an unexpected shape ({type(exc).__name__})")


def reasoning_model(model: str) -> bool:
    """Whether an OpenAI model name may reason: every name but the families known not to (``gpt-4*``,
    ``gpt-3.5``, ``chatgpt-4o``, ``gpt-5*-chat``), which answer 400 to reasoning fields."""
    return not _NOT_REASONING.search(model)


def reported_model(value: Any) -> str:
    """The model name an upstream reported, when it is a plausible name; else "" (the target's model stands)."""
    if isinstance(value, str) and len(value) <= MAX_MODEL_NAME and value.isprintable():
        return value
    return ""


def delay_seconds(value: Any, scale: float = 1.0) -> float | None:
    """A delay an upstream asked for, in seconds: None unless a finite, non-negative number; capped."""
    try:
        seconds = float(value) / scale
    except (TypeError, ValueError):
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, MAX_RETRY_AFTER_S)


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """``retry-after-ms`` first, then ``retry-after`` as seconds or an HTTP date (what the SDKs do).

    ``inf``, ``nan``, negative numbers and dates out of range are treated as absent; a delay over
    a day is capped to a day (still longer than any retry window, so the router moves on).
    """
    ms = headers.get("retry-after-ms")
    if ms:
        seconds = delay_seconds(ms, 1000)
        if seconds is not None:
            return seconds
    value = headers.get("retry-after")
    if not value:
        return None
    seconds = delay_seconds(value)
    if seconds is not None:
        return seconds
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    try:
        at = email.utils.mktime_tz(parsed)
    except (ValueError, OverflowError):  # a year the platform cannot represent
        return None
    return min(MAX_RETRY_AFTER_S, max(0.0, at - time.time()))


class MalformedEvents:
    """Counts (metric) and logs the stream events a parser skipped: the first per stream as a warning."""

    __slots__ = ("count", "target")

    def __init__(self, target: str) -> None:
        self.target = target
        self.count = 0

    def skip(self, data: bytes, exc: BaseException) -> None:
        self.count += 1
        metrics.UPSTREAM_MALFORMED_EVENTS.inc(self.target or "unknown")
        # repr() escapes control characters: upstream text cannot forge log lines.
        level = logging.WARNING if self.count == 1 else logging.DEBUG
        if log.isEnabledFor(level):
            log.log(level, "skipped a malformed stream event from %s (%s, %d bytes): %r", self.target or "unknown",
                    type(exc).__name__, len(data), data[:80])


    def check(self, response: ModelResponse) -> ModelResponse:
        """``response``, unless events were skipped and it carries nothing: then the answer was lost, not empty.

        A stream whose only content event was malformed still ends with a valid finish event; taken
        as is, it would be a 200 with an empty answer (a truncated success). Raised before anything
        was yielded, the walk fails over as for a wrong-shaped answer. An upstream that skips
        nothing may still answer empty: that is the model's answer.
        """
        if self.count and not _carries_anything(response):
            raise ProviderError(ErrorClass.INVALID_RESPONSE, f"upstream stream delivered nothing valid "
                                f"({self.count} malformed event(s) skipped)")
        return response


def _carries_anything(response: ModelResponse) -> bool:
    message = response.message
    return bool(message.get("content") or message.get("tool_calls") or message.get("reasoning_content")
                or message.get("thinking_blocks") or response.finish_reason == "content_filter")


def class_for_status(status: int) -> ErrorClass:
    if status == 429:
        return ErrorClass.RATE_LIMITED
    if status in (401, 403):
        return ErrorClass.AUTH
    if status == 404:
        return ErrorClass.NOT_FOUND
    if status == 409:  # a lock or concurrent-update conflict upstream: the SDKs retry it
        return ErrorClass.SERVER_ERROR
    if status in (408, 504):
        return ErrorClass.TIMEOUT
    if status in (503, 529):
        return ErrorClass.OVERLOADED
    if status >= 500:
        return ErrorClass.SERVER_ERROR
    return ErrorClass.BAD_REQUEST


_CONTEXT_MARKERS = ("context_length_exceeded", "context length", "context window", "maximum context",
                    "prompt is too long", "too many tokens", "input token count", "exceeds the maximum")


def looks_like_context_overflow(message: str, code: Any = None) -> bool:
    text = f"{code or ''} {message}".lower()
    return any(marker in text for marker in _CONTEXT_MARKERS)


def error_from_status(status: int, headers: Mapping[str, str], message: str, code: Any = None,
                      no_retry: bool = False) -> ProviderError:
    """The status-driven part of error mapping that every wire format shares."""
    error_class = class_for_status(status)
    if error_class is ErrorClass.BAD_REQUEST and looks_like_context_overflow(message, code):
        error_class = ErrorClass.CONTEXT_LENGTH
    should_retry = headers.get("x-should-retry")
    if should_retry == "false":
        no_retry = True
    return ProviderError(error_class, message, status=status, retry_after=retry_after_seconds(headers),
                         no_retry=no_retry)


def forced_choice_problem(request: ModelRequest) -> ProviderError | None:
    """A native caller's forced tool choice the tools this target gets cannot honour: a 400 naming ``tool_choice``.

    A Messages caller's typed tools (``web_search_*``, ``bash_*``, ...) reach Anthropic targets only;
    forcing one, or forcing any tool when none is left, must not turn into a free answer (the
    choice dropped with the tools) or the upstream's own less clear 400 on another format. A
    chat-shaped caller's choice is the upstream's to judge, as before (``native`` is None).
    """
    if request.native is None:
        return None
    choice, tools = request.tool_choice, request.tools
    if choice == "required":
        if tools:
            return None
        return ProviderError(ErrorClass.BAD_REQUEST, "tool_choice: a tool call is required ('any'), but none of the "
                             "request's tools can be sent to this target (typed tools such as web_search_* and "
                             "bash_* go to Anthropic targets only)", status=400)
    function = choice.get("function") if isinstance(choice, dict) and choice.get("type") == "function" else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        return None
    for tool in tools:
        declared = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(declared, dict) and declared.get("name") == name:
            return None
    return ProviderError(ErrorClass.BAD_REQUEST, f"tool_choice: names the tool {name!r}, which is not among the tools "
                         "this target can be sent (typed tools such as web_search_* and bash_* go to Anthropic "
                         "targets only)", status=400)
