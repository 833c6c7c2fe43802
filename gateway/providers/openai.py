"""OpenAI Chat Completions and every server that speaks it (vLLM, Ollama, Groq, DeepSeek, Azure).

The canonical transcript is already this shape, so translation is mostly *removal*: artifacts
owned by other wire formats are stripped, and ``reasoning_content`` goes back per ``reasoning_passback``:
by default (``auto``) only to the provider that produced it, for the current request's tool-call turns
(DeepSeek answers 400 without it there; strict servers such as Groq answer 400 to the field).
"""

# Long by design: one module per wire format: the whole request and response translation for OpenAI-
# compatible chat completions, Azure included.

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
    history_arguments_text,
    load_json,
    normalize_finish_reason,
    strip_artifacts,
    text_of,
    token_count,
)
from gateway.canonical_tool_results import takes_tool_result_images, tool_messages_for
from gateway.config.providers_section import ProviderConfig
from gateway.providers import urls
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
    forced_choice_problem,
    invalid_response,
    load_body,
    looks_like_context_overflow,
    reported_model,
    unreadable_error,
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


# Reasoning that arrived as ``reasoning`` (Groq, OpenRouter, Ollama), not ``reasoning_content``: its origin
# is this marker, which names no provider, so ``auto`` never sends it back (Groq answers 400 to either field).
_REASONING_NOT_TAKEN_BACK = ""


def _messages_for(provider: ProviderConfig, messages: list[Message]) -> list[Message]:
    """The transcript as this server takes it: foreign artifacts stripped, reasoning per ``reasoning_passback``.

    History tool calls whose arguments are not a JSON object go as ``{}`` (``history_arguments``):
    OpenAI-compatible servers answer 400 to invalid JSON there.
    """
    keep_call_extra = _keeps_call_extra(provider.base_url)
    passback = provider.reasoning_passback
    owned: int | None = None
    if passback == "auto":
        owned = _current_turn_start(provider.name, messages)
        passback = owned is not None
    out = []
    for position, message in enumerate(messages):
        clean = strip_artifacts(message)
        calls = message.get("tool_calls")
        if calls:
            if keep_call_extra and clean is not message:
                clean = {**clean, "tool_calls": calls}
            clean = _valid_arguments(clean)
        if not passback:
            out.append(clean)
            continue
        if owned is not None:  # auto: only the current turn's tool calls, only this provider's own reasoning
            if calls and position > owned:
                mine = message.get("reasoning_origin") == provider.name
                clean = {**clean, "reasoning_content": (message.get("reasoning_content") or "") if mine else ""}
        elif message.get("role") == "assistant" and calls:
            clean = {**clean, "reasoning_content": message.get("reasoning_content") or ""}
        elif "reasoning_content" in message:
            clean = {**clean, "reasoning_content": message["reasoning_content"]}
        out.append(clean)
    return out


def _current_turn_start(provider_name: str, messages: list[Message]) -> int | None:
    """``auto``: the index of the last user message when a tool-call turn after it has this provider's reasoning.

    None means nothing to pass back: reasoning goes only to the provider that produced it, and only
    for the tool-call turns of the current request (after the last user message), where DeepSeek,
    Kimi and vLLM reasoning parsers need it; every tool-call turn there then carries the field
    (``""`` when it has no reasoning of this provider), as DeepSeek requires.
    """
    found = False
    for position in range(len(messages) - 1, -1, -1):
        message = messages[position]
        role = message.get("role")
        if role == "user":
            return position if found else None
        if (role == "assistant" and message.get("reasoning_origin") == provider_name
                and message.get("reasoning_content") and message.get("tool_calls")):
            found = True
    return -1 if found else None


def _valid_arguments(message: Message) -> Message:
    """``message`` with every tool call's arguments a JSON object string (a copy only when one was not)."""
    calls = message["tool_calls"]
    fixed = None
    for index, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        arguments = function.get("arguments")
        text = history_arguments_text(arguments)
        if text is not arguments:
            if fixed is None:
                fixed = list(calls)
            fixed[index] = {**call, "function": {**function, "arguments": text}}
    return message if fixed is None else {**message, "tool_calls": fixed}


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


def request_headers(provider: ProviderConfig) -> dict[str, str]:
    """Azure deployments (``api_version`` set) take the key as ``api-key``; other OpenAI-format servers a bearer."""
    headers = {"content-type": "application/json"}
    if provider.api_key:
        if provider.api_version:
            headers["api-key"] = provider.api_key
        else:
            headers["authorization"] = f"Bearer {provider.api_key}"
    headers.update(provider.headers)
    return headers


class OpenAIAdapter:
    wire_format = "openai"

    def build_request(self, request: ModelRequest, provider: ProviderConfig, model: str,
                      stream: bool) -> UpstreamRequest:
        problem = forced_choice_problem(request)
        if problem is not None:
            raise problem
        body: dict[str, Any] = dict(request.params)
        body["model"] = model
        # Tool results with images: as text here (capability data, ``canonical_tool_results``).
        messages = tool_messages_for(request.messages, takes_tool_result_images(self.wire_format, model))
        body["messages"] = _messages_for(provider, messages)
        if request.tools:
            body["tools"] = request.tools
            if request.tool_choice is not None:
                body["tool_choice"] = request.tool_choice
        else:
            body.pop("parallel_tool_calls", None)
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        url = (urls.azure_chat(provider.base_url, model, provider.api_version) if provider.api_version
               else urls.openai_chat(provider.base_url))
        return UpstreamRequest(url=url, headers=request_headers(provider), body=orjson.dumps(body))

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
            fields = _error_fields(body)
            if fields is None:
                return unreadable_error(status, headers, body)
            message, code, kind = fields
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


def _error_fields(body: bytes) -> tuple[str, Any, Any] | None:
    """(message, code, type) of an error body; None when it is not JSON."""
    try:
        payload = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return None
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or ""), error.get("code"), error.get("type")
    if isinstance(error, str):
        return error, None, None
    if isinstance(payload, dict) and "message" in payload:
        return str(payload["message"]), None, None
    return "", None, None
