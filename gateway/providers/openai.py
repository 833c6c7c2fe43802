"""OpenAI Chat Completions and every server that speaks it (vLLM, Ollama, Groq, DeepSeek, Azure).

The canonical transcript is already this shape, so translation is mostly *removal*: artifacts
owned by other wire formats are stripped, and ``reasoning_content`` goes back only to servers
that require it (``reasoning_passback``; DeepSeek answers 400 without it, others reject it).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.canonical import (
    Answering,
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    ReasoningDelta,
    StreamDelta,
    TextDelta,
    ToolCallAccumulator,
    Usage,
    normalize_finish_reason,
    strip_artifacts,
    text_of,
    token_count,
)
from gateway.config.model import ProviderConfig
from gateway.providers.base import (
    DICT_OR_NONE,
    MALFORMED,
    STR_OR_NONE,
    ErrorClass,
    MalformedEvents,
    ProviderError,
    SSEEvent,
    UpstreamRequest,
    error_from_status,
    invalid_response,
    load_body,
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


# Gemini's OpenAI-compatible endpoint returns thought signatures in tool_calls[].extra_content and
# (Gemini 3) rejects a tool turn that comes back without them: the one OpenAI-format server to keep them for.
_SIGNATURE_PASSBACK_HOSTS = ("generativelanguage.googleapis.com", "aiplatform.googleapis.com")


@functools.cache  # base URLs come from the config: a handful, each decided once
def _keeps_call_extra(base_url: str) -> bool:
    return any(host in base_url for host in _SIGNATURE_PASSBACK_HOSTS)


def _messages_for(provider: ProviderConfig, messages: list[Message]) -> list[Message]:
    keep_call_extra = _keeps_call_extra(provider.base_url)
    if not provider.reasoning_passback and not keep_call_extra:
        return [strip_artifacts(m) for m in messages]
    out = []
    for message in messages:
        clean = strip_artifacts(message)
        if keep_call_extra and clean is not message and message.get("tool_calls"):
            clean = {**clean, "tool_calls": message["tool_calls"]}
        if not provider.reasoning_passback:
            out.append(clean)
            continue
        if message.get("role") == "assistant" and message.get("tool_calls"):
            clean = {**clean, "reasoning_content": message.get("reasoning_content") or ""}
        elif "reasoning_content" in message:
            clean = {**clean, "reasoning_content": message["reasoning_content"]}
        out.append(clean)
    return out


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


Fragment = tuple[Any, Any, Any, Any, Any]
_ARGUMENTS = (str, dict, type(None))


def _fragment(call: Any, position: int | None) -> Fragment:
    """(index, id, name, arguments, extra_content) of one tool call or stream fragment, type-checked.

    ``arguments`` may be an object instead of a JSON string (Ollama and other compatible servers
    send that): it is accepted and serialised. Any other type is a malformed answer.
    """
    function = call.get("function") or {}
    name, arguments = function.get("name"), function.get("arguments")
    call_id, extra = call.get("id"), call.get("extra_content")
    index = call.get("index") if position is None else position
    if (not isinstance(name, STR_OR_NONE) or not isinstance(call_id, STR_OR_NONE)
            or not isinstance(arguments, _ARGUMENTS) or not isinstance(extra, DICT_OR_NONE)
            or not (index is None or type(index) is int)):
        raise TypeError("tool call")
    return index, call_id, name, arguments, extra


def _in_stream_error(error: Any) -> ProviderError:
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
                 "_reasoning", "_refusal", "_text", "_usage")

    def __init__(self, target: str = "", model: str = "") -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
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
            chunk = orjson.loads(data)
            if not isinstance(chunk, dict):
                raise TypeError("chunk")
            if chunk.get("error"):  # "error": null beside an answer (some compatible servers) is no error
                raise _in_stream_error(chunk["error"])
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
        fragments: list[Fragment] = []
        if choice is not None:
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if text is not None and text.__class__ is not str:
                text = _text(text)
            refusal = delta.get("refusal")
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
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
            deltas.append(ReasoningDelta(reasoning))
        for fragment in fragments:
            self._calls.add(*fragment)
        if finish:
            self._finish = _FINISH.get(finish, "stop")
        return deltas

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
        return ModelResponse(
            message=message,
            finish_reason=normalize_finish_reason(self._finish, bool(calls)),
            usage=self._usage,
            model=self._model,
            id=self._id,
        )


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


class OpenAIAdapter:
    wire_format = "openai"

    def build_request(self, request: ModelRequest, provider: ProviderConfig, model: str,
                      stream: bool) -> UpstreamRequest:
        body: dict[str, Any] = dict(request.params)
        body["model"] = model
        body["messages"] = _messages_for(provider, request.messages)
        if request.tools:
            body["tools"] = request.tools
            if request.tool_choice is not None:
                body["tool_choice"] = request.tool_choice
        else:
            body.pop("parallel_tool_calls", None)
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        headers = {"content-type": "application/json"}
        if provider.api_version:
            url = (f"{provider.base_url}/openai/deployments/{model}/chat/completions"
                   f"?api-version={provider.api_version}")
            if provider.api_key:
                headers["api-key"] = provider.api_key
        else:
            url = f"{provider.base_url}/chat/completions"
            if provider.api_key:
                headers["authorization"] = f"Bearer {provider.api_key}"
        headers.update(provider.headers)
        return UpstreamRequest(url=url, headers=headers, body=orjson.dumps(body))

    def parse_response(self, body: bytes) -> ModelResponse:
        payload = load_body(body)
        if not isinstance(payload, dict):
            raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream returned an unexpected JSON document")
        if payload.get("error"):  # "error": null beside an answer (some compatible servers) is no error
            raise _in_stream_error(payload["error"])
        try:
            return _response(payload)
        except MALFORMED as exc:
            raise invalid_response(exc) from None

    def new_stream_parser(self, target: str = "", model: str = "") -> OpenAIStreamParser:
        return OpenAIStreamParser(target, model)

    def parse_error(self, status: int, headers: Mapping[str, str], body: bytes) -> ProviderError:
        try:
            message, code, kind = _error_fields(body)
            no_retry = "insufficient_quota" in f"{code} {kind}"
        except MALFORMED:
            message, code, no_retry = "", None, False
        if code == "tool_use_failed":
            # Groq could not parse the model's own tool call: an upstream failure, not the client's 400.
            return ProviderError(ErrorClass.INVALID_RESPONSE, message or "upstream failed to parse a tool call",
                                 status=status)
        return error_from_status(status, headers, message or f"upstream returned HTTP {status}", code, no_retry)


def _response(payload: dict[str, Any]) -> ModelResponse:
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
    finish = choice.get("finish_reason")
    return ModelResponse(
        message=message,
        finish_reason=normalize_finish_reason(_FINISH.get(finish) if isinstance(finish, str) else None,
                                              bool(calls)),
        usage=parse_usage(payload.get("usage")),
        model=reported_model(payload.get("model")),
        id=_string(payload.get("id")),
    )


def _error_fields(body: bytes) -> tuple[str, Any, Any]:
    try:
        payload = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return body[:500].decode("utf-8", "replace").strip(), None, None
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or ""), error.get("code"), error.get("type")
    if isinstance(error, str):
        return error, None, None
    if isinstance(payload, dict) and "message" in payload:
        return str(payload["message"]), None, None
    return "", None, None
