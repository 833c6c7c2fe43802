"""Gemini responses -> canonical turns, whole or streamed, through one assembler.

``generateContent`` and every ``streamGenerateContent?alt=sse`` event are the same document
(``GenerateContentResponse``); a stream event simply holds only the parts that are new since
the previous one. So both paths feed chunks to one ``GeminiTurn``: a streamed turn then equals
the parsed whole response by construction, not by two implementations agreeing.

Artifacts kept on the canonical message (see ``gateway.canonical``):

* a ``thoughtSignature`` on a ``functionCall`` part -> ``tool_calls[i].extra_content.google.
  thought_signature`` (the convention of Google's own OpenAI-compatible endpoint);
* Gemini's own ``functionCall.id`` -> ``tool_calls[i].extra_content.google.function_call_id``.
  The marker is what tells the request builder an id is real and may be echoed to Gemini; ids
  the gateway generated (or other providers produced) are never sent;
* a signature on any other part (text, thought, or the empty trailing text part a stream may
  end with) -> ``message.extra_content.google.thought_signature``. Gemini recommends but does not
  require returning it, so only the last one is kept and it goes back on the text part;
* a built-in tool's ``toolCall`` / ``toolResponse`` parts (Google Search beside functions, Gemini 3)
  -> ``message.extra_content.google.server_parts``, verbatim, circulated back before the turn's
  text and calls as the tool-combination docs require.

A Google Search the answer grounded on (``groundingMetadata``: its queries and sources) is reported
as a ``HostedToolCall`` (``ModelResponse.hosted_calls``; a stream says it with the turn's end).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.canonical import (
    Answering,
    FinishReason,
    HostedToolCall,
    Message,
    ModelResponse,
    ReasoningDelta,
    StreamDelta,
    TextDelta,
    ToolCall,
    Usage,
    load_json,
    normalize_finish_reason,
    stable_tool_call_id,
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
    class_for_status,
    looks_like_context_overflow,
    reported_model,
)
from gateway.providers.hosted import gemini_search

#: a turn's built-in tool parts kept to circulate back (Google Search beside functions: a few per turn)
MAX_SERVER_PARTS = 64

# Gemini has no "tool_calls" reason: calls are inferred from the parts (normalize_finish_reason).
# MALFORMED_FUNCTION_CALL / UNEXPECTED_TOOL_CALL / TOO_MANY_TOOL_CALLS end a turn without a usable
# call; they map to "stop" here and the loop sees an answer without calls.
_FINISH: dict[str, FinishReason] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "LANGUAGE": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
}

# google.rpc.Code name -> canonical class, for errors that arrive inside a 200 (stream or body).
_STATUS_CLASS: dict[str, ErrorClass] = {
    "RESOURCE_EXHAUSTED": ErrorClass.RATE_LIMITED,
    "UNAVAILABLE": ErrorClass.OVERLOADED,
    "INTERNAL": ErrorClass.SERVER_ERROR,
    "UNKNOWN": ErrorClass.SERVER_ERROR,
    "DEADLINE_EXCEEDED": ErrorClass.TIMEOUT,
    "INVALID_ARGUMENT": ErrorClass.BAD_REQUEST,
    "FAILED_PRECONDITION": ErrorClass.BAD_REQUEST,
    "OUT_OF_RANGE": ErrorClass.BAD_REQUEST,
    "PERMISSION_DENIED": ErrorClass.AUTH,
    "UNAUTHENTICATED": ErrorClass.AUTH,
    "NOT_FOUND": ErrorClass.NOT_FOUND,
}


def finish_reason_for(native: str | None) -> FinishReason:
    if not native:
        return "stop"
    if native.startswith("IMAGE_"):
        return "content_filter"
    return _FINISH.get(native, "stop")


def parse_usage(raw: Any) -> Usage:
    """``candidatesTokenCount`` excludes thoughts, so completion = candidates + thoughts.

    Counts that are not plausible token counts (``token_count``) are treated as not reported.
    """
    if not isinstance(raw, dict):
        return Usage()
    thoughts = token_count(raw.get("thoughtsTokenCount"))
    return Usage(
        prompt_tokens=token_count(raw.get("promptTokenCount")) + token_count(raw.get("toolUsePromptTokenCount")),
        completion_tokens=token_count(raw.get("candidatesTokenCount")) + thoughts,
        cached_tokens=token_count(raw.get("cachedContentTokenCount")),
        reasoning_tokens=thoughts,
    )


def error_details(error: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``details`` objects of a google.rpc error (whatever else a relay put there is ignored)."""
    details = error.get("details")
    return [d for d in details if isinstance(d, dict)] if isinstance(details, list) else []


def api_key_invalid(error: dict[str, Any]) -> bool:
    """Gemini answers a bad key with 400 INVALID_ARGUMENT; it is a target fault, not the caller's."""
    if "api key not valid" in str(error.get("message") or "").lower():
        return True
    return any(d.get("reason") == "API_KEY_INVALID" for d in error_details(error))


def google_error(error: Any, status: int | None = None) -> ProviderError:
    """A google.rpc ``{"code", "message", "status", "details"}`` object found inside a 200 response."""
    if not isinstance(error, dict):
        return ProviderError(ErrorClass.SERVER_ERROR, str(error), status=status)
    message = str(error.get("message") or "upstream error")
    rpc_status = str(error.get("status") or "")
    code = error.get("code")
    if rpc_status in _STATUS_CLASS:
        error_class = _STATUS_CLASS[rpc_status]
    elif isinstance(code, int) and code >= 400:
        error_class = class_for_status(code)
    else:
        error_class = ErrorClass.SERVER_ERROR
    if error_class is ErrorClass.BAD_REQUEST:
        if api_key_invalid(error):
            error_class = ErrorClass.AUTH
        elif looks_like_context_overflow(message, rpc_status):
            error_class = ErrorClass.CONTEXT_LENGTH
    return ProviderError(error_class, message, status=status if status is not None else
                         (code if isinstance(code, int) else None))


def _first_candidate(payload: dict[str, Any]) -> dict[str, Any] | None:
    """The candidate with index 0 (``index`` is omitted for it in some responses); TypeError if malformed."""
    candidates = payload.get("candidates") or ()
    if not isinstance(candidates, (list, tuple)):
        raise TypeError("candidates")
    for candidate in candidates:
        if (candidate.get("index") or 0) == 0:
            return candidate
    return None


def _parts(candidate: dict[str, Any]) -> list[dict[str, Any]]:
    """A candidate's parts, every field the turn reads type-checked before anything is kept."""
    if not isinstance(candidate.get("finishReason"), STR_OR_NONE):
        raise TypeError("finishReason")
    content = candidate.get("content")
    if content is None:
        return []
    parts = content.get("parts")
    if parts is None:
        return []
    if not isinstance(parts, list):
        raise TypeError("parts")
    for part in parts:
        call = part.get("functionCall")
        if not isinstance(part.get("text"), STR_OR_NONE) or not isinstance(call, DICT_OR_NONE):
            raise TypeError("part")
        if call is not None and (not isinstance(call.get("name"), str) or not isinstance(call.get("args"), DICT_OR_NONE)
                                 or not isinstance(call.get("id"), STR_OR_NONE)):
            raise TypeError("functionCall")
    return parts


class GeminiTurn:
    """Accumulates one model turn from whole or partial ``GenerateContentResponse`` documents."""

    __slots__ = ("_blocked", "_calls", "_finish", "_grounding", "_id", "_model", "_read", "_reasoning", "_search_call",
                 "_searched", "_server_parts", "_signature", "_text", "_usage")

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[ToolCall] = []
        self._signature: str | None = None
        self._finish: str | None = None
        self._blocked = False
        self._usage = Usage()
        self._id = ""
        self._model = ""
        self._read = False  # a candidate (or a blocked prompt) was read: the document was an answer
        self._grounding: dict[str, Any] | None = None  # the candidate's groundingMetadata (a Google Search ran)
        self._searched = False  # the search was said (a stream says it once, with the turn's end)
        self._search_call: HostedToolCall | None = None
        self._server_parts: list[dict[str, Any]] = []  # toolCall / toolResponse parts, circulated back verbatim

    @property
    def finished(self) -> bool:
        return self._finish is not None or self._blocked

    @property
    def usage(self) -> Usage:
        return self._usage

    def produced_so_far(self) -> str:
        calls = "".join(call["function"]["name"] + call["function"]["arguments"] for call in self._calls)
        return "".join(self._text) + "".join(self._reasoning) + calls

    @property
    def readable(self) -> bool:
        return self._read

    @property
    def model(self) -> str:
        return self._model

    def add(self, payload: dict[str, Any]) -> list[StreamDelta]:
        """Add one document. A document of the wrong shape raises (one of ``MALFORMED``) and changes nothing."""
        if payload.get("error"):
            raise google_error(payload["error"])
        candidate = _first_candidate(payload)
        parts = _parts(candidate) if candidate is not None else []
        self._id = self._id or _string(payload.get("responseId"))
        self._model = self._model or reported_model(payload.get("modelVersion"))
        if isinstance(payload.get("usageMetadata"), dict):
            self._usage = parse_usage(payload["usageMetadata"])
        feedback = payload.get("promptFeedback")
        if not payload.get("candidates") and isinstance(feedback, dict) and feedback.get("blockReason"):
            self._blocked = self._read = True
        if candidate is None:
            return []
        self._read = True
        grounding = candidate.get("groundingMetadata")
        if isinstance(grounding, dict):
            self._grounding = grounding
        deltas = self._add_parts(parts)
        if candidate.get("finishReason"):
            self._finish = candidate["finishReason"]
            search = self._search()
            if search is not None:
                deltas.append(search)
        return deltas

    def _search(self) -> HostedToolCall | None:
        """The Google Search the grounding metadata reports, once (None when there is none, or it was said)."""
        if self._grounding is None or self._searched:
            return None
        self._searched = True
        self._search_call = gemini_search(self._grounding, self._id)
        return self._search_call

    def _add_parts(self, parts: list[dict[str, Any]]) -> list[StreamDelta]:
        deltas: list[StreamDelta] = []
        for part in parts:
            signature = part.get("thoughtSignature")
            call = part.get("functionCall")
            if isinstance(call, dict):
                self._add_call(call, signature)
                continue
            if "toolCall" in part or "toolResponse" in part:  # a built-in tool's (Google Search beside functions)
                if len(self._server_parts) < MAX_SERVER_PARTS:
                    self._server_parts.append(part)
                continue
            # Checked before the text: a signature may ride on an empty text part (stream tail).
            if signature:
                self._signature = str(signature)
            text = part.get("text")
            if not isinstance(text, str) or not text:
                continue
            if part.get("thought"):
                self._reasoning.append(text)
                deltas.append(ReasoningDelta(text))
            else:
                self._text.append(text)
                deltas.append(TextDelta(text))
        return deltas

    def _add_call(self, call: dict[str, Any], signature: Any) -> None:
        args = call.get("args")
        google: dict[str, Any] = {}
        if call.get("id"):
            google["function_call_id"] = str(call["id"])
        if signature:
            google["thought_signature"] = str(signature)
        tool_call: ToolCall = {
            "id": call.get("id") or "",
            "type": "function",
            "function": {"name": call["name"],
                         "arguments": orjson.dumps(args if isinstance(args, dict) else {}).decode()},
        }
        if google:
            tool_call["extra_content"] = {"google": google}
        self._calls.append(tool_call)

    def result(self) -> ModelResponse:
        text = "".join(self._text)
        message: Message = {"role": "assistant", "content": text or None}
        if self._calls:
            # Without a responseId the seed must still differ between turns: text plus the calls.
            seed = self._id or text + "".join(c["function"]["name"] + c["function"]["arguments"]
                                              for c in self._calls)
            for position, call in enumerate(self._calls):
                if not call["id"]:
                    call["id"] = stable_tool_call_id(seed, position)
            message["tool_calls"] = self._calls
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        google: dict[str, Any] = {}
        if self._signature:
            google["thought_signature"] = self._signature
        if self._server_parts:
            google["server_parts"] = self._server_parts
        if google:
            message["extra_content"] = {"google": google}
        search = self._search() or self._search_call
        # A blocked prompt has no candidate: an empty, filtered answer rather than an error, since
        # neither a retry nor another target of the same model would answer it differently.
        native: FinishReason = "content_filter" if self._blocked and self._finish is None else \
            finish_reason_for(self._finish)
        return ModelResponse(
            message=message,
            finish_reason=normalize_finish_reason(native, bool(self._calls)),
            usage=self._usage,
            model=self._model,
            id=self._id,
            hosted_calls=(search,) if search is not None else (),
        )


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


def load_payload(data: bytes, what: str) -> dict[str, Any] | None:
    try:
        payload = load_json(data)
    except orjson.JSONDecodeError:
        raise ProviderError(ErrorClass.INVALID_RESPONSE, f"upstream sent {what} that is not JSON") from None
    return payload if isinstance(payload, dict) else None


class GeminiStreamParser:
    """One ``streamGenerateContent?alt=sse`` stream.

    Each event is a complete response holding only new parts: text is incremental, a
    ``functionCall`` arrives whole and without an index, so every one is a new call. There is no
    ``[DONE]``: the chunk with ``finishReason`` (or a blocked prompt) is the end marker.
    """

    __slots__ = ("_announced", "_configured", "_malformed", "_turn")

    def __init__(self, target: str = "", model: str = "") -> None:
        self._turn = GeminiTurn()
        self._configured = model
        self._announced = False
        self._malformed = MalformedEvents(target)

    def feed(self, event: SSEEvent) -> list[StreamDelta]:
        data = event.data
        if data.strip() == b"[DONE]":  # not Gemini's, but harmless from a relaying proxy
            return []
        try:
            payload = load_json(data)
            if not isinstance(payload, dict):
                raise TypeError("chunk")
            deltas = self._turn.add(payload)
        except MALFORMED as exc:  # skipped, as lenient clients do; an in-band error is a ProviderError
            self._malformed.skip(data, exc)
            return []
        if deltas and not self._announced:
            self._announced = True
            deltas.insert(0, Answering(self._turn.model or self._configured))
        return deltas

    def usage_so_far(self) -> Usage:
        return self._turn.usage

    def produced_so_far(self) -> str:
        return self._turn.produced_so_far()

    def finish(self) -> ModelResponse:
        if self._malformed.count and not self._turn.readable:
            raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream stream had no readable event")
        if not self._turn.finished:
            raise ProviderError(ErrorClass.CONNECTION, "upstream stream ended before the response was complete")
        return self._malformed.check(self._turn.result())
