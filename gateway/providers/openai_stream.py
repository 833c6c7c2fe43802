"""OpenAI Chat Completions, response side: a native answer or stream -> canonical turn, in-body errors.

The stream parser and the whole-body parse share the small readers here (usage, content, one tool
call's fragment, the finish reason), and both seed the tool-call ids with the response id, so a
streamed turn and the same turn fetched whole mint the same ids. Split from ``openai.py`` (the
request side and the adapter) as ``anthropic_stream.py`` and ``gemini_stream.py`` are from theirs.
"""

from __future__ import annotations

from typing import Any

from gateway.canonical import (
    Answering,
    FinishReason,
    Message,
    ModelResponse,
    ReasoningDelta,
    StreamDelta,
    TextDelta,
    ToolCallAccumulator,
    Usage,
    load_json,
    normalize_finish_reason,
    text_of,
    token_count,
)
from gateway.providers.base import (
    DICT_OR_NONE,
    MALFORMED,
    STR_OR_NONE,
    ErrorClass,
    MalformedEvents,
    ProviderError,
    SSEEvent,
    looks_like_context_overflow,
    reported_model,
)

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
    # DeepSeek: generation cut short by server load; the output is truncated, not finished.
    "insufficient_system_resource": "length",
}

# Reasoning that arrived as ``reasoning`` (Groq, OpenRouter, Ollama), not ``reasoning_content``: its origin
# is this marker, which names no provider, so ``auto`` never sends it back (Groq answers 400 to either field).
_REASONING_NOT_TAKEN_BACK = ""


def parse_usage(raw: Any) -> Usage:
    """Counts that are not plausible token counts (``token_count``) are treated as not reported."""
    if not isinstance(raw, dict):
        return Usage()
    prompt_details = raw.get("prompt_tokens_details")
    completion_details = raw.get("completion_tokens_details")
    cached = token_count(prompt_details.get("cached_tokens")) if isinstance(prompt_details, dict) else 0
    return Usage(
        prompt_tokens=token_count(raw.get("prompt_tokens")),
        completion_tokens=token_count(raw.get("completion_tokens")),
        cached_tokens=cached or token_count(raw.get("prompt_cache_hit_tokens")),
        reasoning_tokens=(token_count(completion_details.get("reasoning_tokens"))
                          if isinstance(completion_details, dict) else 0),
    )


def _text(value: Any) -> str | None:
    """Message content: a string, null, or (some compatible servers) a list of parts; anything else is malformed."""
    if value is None or isinstance(value, str):
        return value or None
    if isinstance(value, list):
        return text_of(value) or None
    raise TypeError("content")


Fragment = tuple[Any, Any, Any, Any, Any, bool]
_ARGUMENTS = (str, dict, type(None))


def _fragment(call: Any, position: int | None) -> Fragment:
    """(index, id, name, arguments, extra_content, custom) of one tool call or stream fragment, type-checked.

    ``arguments`` may be an object instead of a JSON string (Ollama and other compatible servers
    send that): it is accepted and serialised. Any other type is a malformed answer. A custom
    (freeform) tool's call (``type: "custom"``, ``custom: {name, input}``) carries its input text as
    the arguments; a ``custom`` object beside a ``function`` one (some relays echo an empty one on
    every fragment) is not one.
    """
    function = call.get("function")
    custom = call.get("type") == "custom" or (function is None and call.get("custom") is not None)
    if custom:
        function = call.get("custom")
        if not isinstance(function, DICT_OR_NONE):
            raise TypeError("custom tool call")
        function = function or {}
        name, arguments = function.get("name"), function.get("input")
    else:
        function = function or {}
        name, arguments = function.get("name"), function.get("arguments")
    call_id, extra = call.get("id"), call.get("extra_content")
    index = call.get("index") if position is None else position
    if (not isinstance(name, STR_OR_NONE) or not isinstance(call_id, STR_OR_NONE)
            or not isinstance(arguments, _ARGUMENTS) or not isinstance(extra, DICT_OR_NONE)
            or not (index is None or type(index) is int) or (custom and isinstance(arguments, dict))):
        raise TypeError("tool call")
    return index, call_id, name, arguments, extra, custom


def in_body_error(error: Any) -> ProviderError:
    """An ``{"error": ...}`` object inside a 200 response or stream."""
    if not isinstance(error, dict):
        return ProviderError(ErrorClass.SERVER_ERROR, str(error))
    message = str(error.get("message") or "upstream error")
    kind = f"{error.get('type') or ''} {error.get('code') or ''}".lower()
    if looks_like_context_overflow(message, error.get("code")):
        error_class = ErrorClass.CONTEXT_LENGTH
    elif "overload" in kind or "slow_down" in kind or "unavailable" in kind:
        error_class = ErrorClass.OVERLOADED
    elif "rate_limit" in kind:
        error_class = ErrorClass.RATE_LIMITED
    elif "invalid_request" in kind:
        error_class = ErrorClass.BAD_REQUEST
    else:
        error_class = ErrorClass.SERVER_ERROR
    return ProviderError(error_class, message)


class OpenAIStreamParser:
    __slots__ = ("_announced", "_calls", "_configured", "_done", "_finish", "_id", "_malformed", "_model",
                 "_reasoning", "_reasoning_taken_back", "_refusal", "_text", "_usage")

    def __init__(self, target: str = "", model: str = "") -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._reasoning_taken_back = True  # False once it arrives as ``reasoning``: see _REASONING_NOT_TAKEN_BACK
        self._refusal: list[str] = []
        self._calls = ToolCallAccumulator()
        self._finish: FinishReason | None = None
        self._usage = Usage()
        self._id = ""
        self._model = ""
        self._configured = model
        self._announced = False
        self._done = False
        self._malformed = MalformedEvents(target)

    def feed(self, event: SSEEvent) -> list[StreamDelta]:
        data = event.data
        if data == b"[DONE]":
            self._done = True
            return []
        try:
            chunk = load_json(data)
            if not isinstance(chunk, dict):
                raise TypeError("chunk")
            if chunk.get("error"):  # "error": null beside an answer (some compatible servers) is no error
                raise in_body_error(chunk["error"])
            deltas = self._apply(chunk)
        except MALFORMED as exc:  # skipped, as lenient clients do; an in-band error is a ProviderError
            self._malformed.skip(data, exc)
            return []
        if deltas and not self._announced:
            self._announced = True
            deltas.insert(0, Answering(self._model or self._configured))
        return deltas

    def _apply(self, chunk: dict[str, Any]) -> list[StreamDelta]:
        # Everything is read and type-checked first, so a malformed chunk leaves no trace in the turn.
        # Groq may report usage only in x_groq.usage on the final chunk.
        usage = chunk.get("usage") or (chunk.get("x_groq") or {}).get("usage")
        choice = None
        for candidate in chunk.get("choices") or ():
            if candidate.get("index", 0) == 0:
                choice = candidate
                break
        text = refusal = reasoning = finish = None
        named_reasoning = True  # it came as ``reasoning_content`` (the field sent back), not ``reasoning``
        fragments: list[Fragment] = []
        if choice is not None:
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if text is not None and text.__class__ is not str:
                text = _text(text)
            refusal = delta.get("refusal")
            reasoning = delta.get("reasoning_content")
            if not reasoning:
                reasoning = delta.get("reasoning")
                named_reasoning = False
            calls = delta.get("tool_calls")
            if calls:
                if calls.__class__ is not list:
                    raise TypeError("tool_calls")
                fragments = [_fragment(call, None) for call in calls]
            finish = choice.get("finish_reason")
            if finish is not None and finish.__class__ is not str:
                raise TypeError("finish_reason")
        if not self._id:
            self._id = _string(chunk.get("id"))
        if not self._model:
            self._model = reported_model(chunk.get("model"))
        if usage:
            self._usage = parse_usage(usage)
        deltas: list[StreamDelta] = []
        if text:
            self._text.append(text)
            deltas.append(TextDelta(text))
        if refusal and isinstance(refusal, str):
            # The non-stream parse turns a refusal into content; the client must see its text too.
            self._refusal.append(refusal)
            deltas.append(TextDelta(refusal))
        if reasoning and isinstance(reasoning, str):
            self._reasoning.append(reasoning)
            if not named_reasoning:
                self._reasoning_taken_back = False
            deltas.append(ReasoningDelta(reasoning))
        for fragment in fragments:
            self._calls.add(*fragment)
        if finish:
            self._finish = _FINISH.get(finish, "stop")
        return deltas

    def usage_so_far(self) -> Usage:
        return self._usage

    def produced_so_far(self) -> str:
        return "".join(self._text) + "".join(self._refusal) + "".join(self._reasoning) + self._calls.arguments_so_far()

    def finish(self) -> ModelResponse:
        if self._malformed.count and not (self._text or self._refusal or self._reasoning or self._calls
                                          or self._finish):
            raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream stream had no readable event")
        if not self._done and self._finish is None:
            raise ProviderError(ErrorClass.CONNECTION, "upstream stream ended before the response was complete")
        message: Message = {"role": "assistant", "content": "".join(self._text) or "".join(self._refusal) or None}
        calls = self._calls.result(self._id or message["content"] or "")
        if calls:
            message["tool_calls"] = calls
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
            if not self._reasoning_taken_back:
                message["reasoning_origin"] = _REASONING_NOT_TAKEN_BACK
        return self._malformed.check(ModelResponse(
            message=message,
            finish_reason=normalize_finish_reason(self._finish, bool(calls)),
            usage=self._usage,
            model=self._model,
            id=self._id,
        ))


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""

def response_from(payload: dict[str, Any]) -> ModelResponse:
    """A whole (non-stream) answer as the canonical turn; a malformed one raises one of ``MALFORMED``."""
    choices = payload.get("choices")
    if not choices or not isinstance(choices, list):
        raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream response has no choices")
    choice = choices[0]
    native = choice.get("message") or {}
    # "" (DeepSeek beside tool calls) is None, as a stream without text parses.
    message: Message = {"role": "assistant", "content": _text(native.get("content"))}
    refusal = native.get("refusal")
    if refusal and isinstance(refusal, str) and not message["content"]:
        message["content"] = refusal
    native_calls = native.get("tool_calls")
    calls: list[Any] = []
    if native_calls:
        if not isinstance(native_calls, list):
            raise TypeError("tool_calls")
        accumulator = ToolCallAccumulator()
        for position, call in enumerate(native_calls):
            accumulator.add(*_fragment(call, position))
        # Same seed as the stream parser, so both parses of one turn mint the same ids.
        response_id = _string(payload.get("id"))
        calls = accumulator.result(response_id or text_of(message["content"]))
        message["tool_calls"] = calls
    reasoning = native.get("reasoning_content") or native.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        message["reasoning_content"] = reasoning
        if not native.get("reasoning_content"):
            message["reasoning_origin"] = _REASONING_NOT_TAKEN_BACK
    finish = choice.get("finish_reason")
    return ModelResponse(
        message=message,
        finish_reason=normalize_finish_reason(_FINISH.get(finish) if isinstance(finish, str) else None,
                                              bool(calls)),
        usage=parse_usage(payload.get("usage")),
        model=reported_model(payload.get("model")),
        id=_string(payload.get("id")),
    )
