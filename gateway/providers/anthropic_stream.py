"""Anthropic Messages, response side: a native message -> canonical turn, in-body errors, streaming.

The stream parser rebuilds the native ``content`` array block by block and hands the finished
message to the same function that converts a non-stream body, so a streamed turn and the same
turn fetched whole produce equal ``ModelResponse`` objects (same text, same calls, same thinking
blocks with their full signatures, same ``anthropic_content``) by construction rather than by two
parallel code paths.

A web search Anthropic ran (a Responses caller's ``web_search``, mapped: ``providers/hosted.py``)
is reported as a ``HostedToolCall`` (``ModelResponse.hosted_calls``; a stream says it when its
``web_search_tool_result`` block starts), so a renderer can show the search; the answer's text is
the text blocks as always.

The canonical turn keeps the ``content`` array as received under ``anthropic_content``, so the
turn goes back to Anthropic verbatim (citations, server tool blocks, signatures: the prompt cache
keeps hitting). Not when a tool input is not a JSON object (a streamed input cut off at
``max_tokens`` stays text): Anthropic would reject those blocks, so the translation of the
canonical calls is sent instead; nor when the array is empty (nothing to send back).
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
    ReasoningSignature,
    RedactedReasoning,
    StreamDelta,
    TextDelta,
    ToolCallAccumulator,
    Usage,
    load_json,
    normalize_finish_reason,
    token_count,
)
from gateway.providers.anthropic_errors import error_from_body
from gateway.providers.base import (
    MALFORMED,
    STR_OR_NONE,
    ErrorClass,
    MalformedEvents,
    ProviderError,
    SSEEvent,
    invalid_response,
    reported_model,
)
from gateway.providers.hosted import MAX_HOSTED_CALLS, anthropic_search, anthropic_search_uses

# Unknown values (Anthropic adds them) fall back to "stop"; tool_use blocks override it anyway.
STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

THINKING_TYPES = ("thinking", "redacted_thinking")
# Blocks whose ``input`` is a tool call's input (always an object when whole).
TOOL_INPUT_TYPES = ("tool_use", "server_tool_use")
# The string field each delta type carries (checked before the block being rebuilt changes).
_DELTA_FIELDS = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "signature",
                 "input_json_delta": "partial_json"}
def parse_usage(raw: Any) -> Usage:
    """Counts that are not plausible token counts (``token_count``) are treated as not reported."""
    if not isinstance(raw, dict):
        return Usage()
    details = raw.get("output_tokens_details")
    cache_read = token_count(raw.get("cache_read_input_tokens"))
    return Usage(
        # input_tokens excludes cached tokens; the OpenAI prompt count includes them.
        prompt_tokens=token_count(raw.get("input_tokens")) + token_count(raw.get("cache_creation_input_tokens"))
        + cache_read,
        completion_tokens=token_count(raw.get("output_tokens")),
        cached_tokens=cache_read,
        reasoning_tokens=token_count(details.get("thinking_tokens")) if isinstance(details, dict) else 0,
        cache_creation_tokens=token_count(raw.get("cache_creation_input_tokens")),
    )


def _arguments(tool_input: Any) -> str:
    if tool_input is None or isinstance(tool_input, str):  # str: a streamed input that did not parse
        return tool_input or ""
    if not isinstance(tool_input, dict):
        raise TypeError("tool_use input")
    return orjson.dumps(tool_input).decode()


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


def check_block(block: Any) -> dict[str, Any]:
    """A content block whose known fields have the types Anthropic documents; TypeError otherwise.

    Unknown block types (server tools, added later) pass: they are skipped, not misread.
    """
    if not isinstance(block, dict):
        raise TypeError("content block")
    kind = block.get("type")
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise TypeError("text block")
    elif kind == "tool_use":
        if not isinstance(block.get("id"), STR_OR_NONE) or not isinstance(block.get("name"), str):
            raise TypeError("tool_use block")
    elif kind == "thinking" and not isinstance(block.get("thinking"), STR_OR_NONE):
        raise TypeError("thinking block")
    return block


def response_from_message(native: Any) -> ModelResponse:
    """Convert one native assistant message (non-stream body, or a stream rebuilt) to canonical form.

    A message the adapter cannot read (no content array, a block of the wrong shape) is an
    INVALID_RESPONSE, never an empty answer.
    """
    try:
        return _response(native)
    except MALFORMED as exc:
        raise invalid_response(exc) from None


def _response(native: Any) -> ModelResponse:
    if not isinstance(native, dict):
        raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream returned an unexpected JSON document")
    if native.get("type") == "error":
        raise error_from_body(native.get("error"))
    content = native.get("content")
    if not isinstance(content, list):
        raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream message has no content array")
    texts: list[str] = []
    reasoning: list[str] = []
    thinking_blocks: list[dict[str, Any]] = []
    calls = ToolCallAccumulator()
    tool_index = 0  # the OpenAI tool-call index counts tool_use blocks only, not content positions
    verbatim = bool(content)
    hosted: list[HostedToolCall] = []
    uses: dict[str, Any] | None = None
    for block in content:
        kind = check_block(block).get("type")
        if verbatim and ("input" in block or kind in TOOL_INPUT_TYPES) and not isinstance(block.get("input"), dict):
            verbatim = False  # a cut-off input: Anthropic takes only objects back
        if kind == "text":
            texts.append(block["text"])
        elif kind == "tool_use":
            calls.add(tool_index, block.get("id"), block.get("name"), _arguments(block.get("input")))
            tool_index += 1
        elif kind in THINKING_TYPES:
            thinking_blocks.append(block)  # verbatim: the signature is replayed byte for byte
            if kind == "thinking" and block.get("thinking"):
                reasoning.append(str(block["thinking"]))
        elif kind == "web_search_tool_result" and len(hosted) < MAX_HOSTED_CALLS:
            uses = anthropic_search_uses(content) if uses is None else uses
            searched = anthropic_search(block, uses)
            if searched is not None:
                hosted.append(searched)
        # server_tool_use and other server tools' blocks: kept verbatim in anthropic_content, nothing to hand on
    response_id = _string(native.get("id"))
    message: Message = {"role": "assistant", "content": "".join(texts) or None}
    tool_calls = calls.result(response_id or "".join(texts))
    if tool_calls:
        message["tool_calls"] = tool_calls
    if thinking_blocks:
        message["thinking_blocks"] = thinking_blocks
    if reasoning:
        message["reasoning_content"] = "\n\n".join(reasoning)
    if verbatim:
        message["anthropic_content"] = content
    stop_reason = native.get("stop_reason")
    native_finish = STOP_REASONS.get(stop_reason, "stop") if stop_reason and isinstance(stop_reason, str) else None
    matched = native.get("stop_sequence")
    return ModelResponse(
        message=message,
        finish_reason=normalize_finish_reason(native_finish, bool(tool_calls)),
        usage=parse_usage(native.get("usage")),
        model=reported_model(native.get("model")),
        id=response_id,
        unfinished=stop_reason == "pause_turn" and not tool_calls,
        stop_sequence=matched if stop_reason == "stop_sequence" and isinstance(matched, str) else None,
        hosted_calls=hosted or (),
    )


class AnthropicStreamParser:
    """Rebuilds the native message from ``message_start`` / ``content_block_*`` / ``message_delta`` events."""

    __slots__ = ("_announced", "_blocks", "_configured", "_done", "_grown", "_json", "_last_reasoning", "_malformed",
                 "_message", "_stop_reason", "_stop_sequence", "_usage")

    def __init__(self, target: str = "", model: str = "") -> None:
        self._message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}  # content index -> block being assembled
        self._json: dict[int, list[str]] = {}  # content index -> input_json_delta fragments
        # (content index, field) -> the pieces of a block's text, thinking or signature, joined when read: adding
        # each delta to the block's string would copy all of it per delta (quadratic in a long answer)
        self._grown: dict[tuple[int, str], list[str]] = {}
        self._usage: dict[str, Any] = {}
        self._stop_reason: str | None = None
        self._stop_sequence: str | None = None
        self._last_reasoning: int | None = None  # block whose thinking text was streamed last
        self._done = False
        self._configured = model
        self._announced = False
        self._malformed = MalformedEvents(target)

    def feed(self, event: SSEEvent) -> list[StreamDelta]:
        try:
            deltas = self._event(event)
        except MALFORMED as exc:  # skipped, as lenient clients do; an in-band error is a ProviderError
            self._malformed.skip(event.data, exc)
            return []
        if deltas and not self._announced:
            self._announced = True
            deltas.insert(0, Answering(reported_model(self._message.get("model")) or self._configured))
        return deltas

    def _event(self, event: SSEEvent) -> list[StreamDelta]:
        # Each handler type-checks what it reads before it changes the message being rebuilt.
        data = load_json(event.data)
        if not isinstance(data, dict):
            raise TypeError("event")
        kind = data.get("type") or event.event
        if kind == "content_block_delta":
            return self._delta(data.get("index"), data.get("delta"))
        if kind == "content_block_start":
            return self._start(data.get("index"), data.get("content_block"))
        if kind == "content_block_stop":
            return self._close(data.get("index"))
        if kind == "message_start":
            message = data.get("message")
            if isinstance(message, dict):
                self._message = {k: v for k, v in message.items() if k not in ("content", "usage")}
                self._merge_usage(message.get("usage"))
        elif kind == "message_delta":
            delta = data.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason") and isinstance(delta["stop_reason"], str):
                self._stop_reason = delta["stop_reason"]
                matched = delta.get("stop_sequence")
                self._stop_sequence = matched if isinstance(matched, str) else None
            self._merge_usage(data.get("usage"))
        elif kind == "message_stop":
            self._done = True
        elif kind == "error":
            raise error_from_body(data.get("error"))
        return []  # ping and event types added after this was written

    def _start(self, index: Any, block: Any) -> list[StreamDelta]:
        if not isinstance(index, int):
            raise TypeError("index")
        block = dict(check_block(block))
        self._blocks[index] = block
        for field in ("text", "thinking", "signature"):  # a block started again at its index starts afresh
            self._grown.pop((index, field), None)
        if "input" in block:  # tool_use, server_tool_use: ``input: {}`` at start is not the real input
            self._json[index] = []
        if block.get("type") == "text" and block.get("text"):
            return [TextDelta(str(block["text"]))]
        if block.get("type") == "thinking" and block.get("thinking"):
            return [self._reasoning(index, str(block["thinking"]))]
        if block.get("type") == "redacted_thinking":  # arrives complete here, with no deltas
            return [RedactedReasoning(str(block.get("data") or ""))]
        if block.get("type") == "web_search_tool_result":  # complete here too: the search it reports, now
            searched = anthropic_search(block, anthropic_search_uses(list(self._blocks.values())))
            return [searched] if searched is not None else []
        return []

    def _delta(self, index: Any, delta: Any) -> list[StreamDelta]:
        if not isinstance(delta, dict) or not isinstance(index, int):
            raise TypeError("content_block_delta")
        kind = delta.get("type")
        field = _DELTA_FIELDS.get(kind) if isinstance(kind, str) else None
        if field is not None and not isinstance(delta.get(field), STR_OR_NONE):
            raise TypeError(field)
        block = self._blocks.get(index)
        if block is None:  # a delta without its start: keep text/thinking rather than lose it
            if kind not in ("text_delta", "thinking_delta"):
                return []
            block = self._blocks[index] = {"type": "text", "text": ""} if kind == "text_delta" else {
                "type": "thinking", "thinking": "", "signature": ""}
        if kind == "text_delta":
            text = str(delta.get("text") or "")
            self._grow(index, block, "text", text)
            return [TextDelta(text)] if text else []
        if kind == "thinking_delta":
            text = str(delta.get("thinking") or "")
            self._grow(index, block, "thinking", text)
            return [self._reasoning(index, text)] if text else []
        if kind == "signature_delta":
            self._grow(index, block, "signature", str(delta.get("signature") or ""))
        elif kind == "input_json_delta":
            self._json.setdefault(index, []).append(str(delta.get("partial_json") or ""))
        elif kind == "citations_delta" and isinstance(delta.get("citation"), dict):
            citations = block.get("citations")
            if not isinstance(citations, list):  # absent or null at content_block_start
                citations = block["citations"] = []
            citations.append(delta["citation"])
        return []  # unknown delta types

    def _grow(self, index: int, block: dict[str, Any], field: str, text: str) -> None:
        pieces = self._grown.get((index, field))
        if pieces is None:
            pieces = self._grown[(index, field)] = [str(block.get(field) or "")]
        pieces.append(text)

    def _settle(self) -> None:
        """The grown fields joined into their blocks (at the end, or for ``produced_so_far`` after a failure)."""
        for (index, field), pieces in self._grown.items():
            if len(pieces) > 1:
                pieces[:] = ["".join(pieces)]
            self._blocks[index][field] = pieces[0]

    def _reasoning(self, index: int, text: str) -> ReasoningDelta:
        # Thinking blocks are joined with a blank line in the whole message; the stream says the same.
        if self._last_reasoning is not None and self._last_reasoning != index:
            text = "\n\n" + text
        self._last_reasoning = index
        return ReasoningDelta(text)

    def _close(self, index: Any) -> list[StreamDelta]:
        """A finished block: a thinking block's signature is said (the Messages surface closes its block with
        it); a tool input is parsed."""
        fragments = self._json.pop(index, None) if isinstance(index, int) else None
        if fragments is None or index not in self._blocks:
            block = self._blocks.get(index) if isinstance(index, int) else None
            if block is not None and block.get("type") == "thinking":
                pieces = self._grown.get((index, "signature"))
                return [ReasoningSignature("".join(pieces) if pieces else str(block.get("signature") or ""))]
            return []
        raw = "".join(fragments)
        tool_input: Any = {}
        if raw.strip():
            try:
                tool_input = load_json(raw)
            except orjson.JSONDecodeError:
                tool_input = raw  # truncated at max_tokens: hand on the text, finish_reason says length
            if not isinstance(tool_input, dict):
                tool_input = raw
        self._blocks[index]["input"] = tool_input
        return []

    def usage_so_far(self) -> Usage:
        return parse_usage(self._usage)

    def produced_so_far(self) -> str:
        self._settle()
        parts = [str(block.get("text") or block.get("thinking") or "") for block in self._blocks.values()]
        parts.extend("".join(fragments) for fragments in self._json.values())
        return "".join(parts)

    def _merge_usage(self, usage: Any) -> None:
        # message_delta usage is cumulative and may repeat input counts; null means "not reported here".
        if isinstance(usage, dict):
            self._usage.update({k: v for k, v in usage.items() if v is not None})

    def finish(self) -> ModelResponse:
        if self._malformed.count and not self._blocks and not self._message:
            raise ProviderError(ErrorClass.INVALID_RESPONSE, "upstream stream had no readable event")
        if not self._done:
            raise ProviderError(ErrorClass.CONNECTION, "upstream stream ended before message_stop")
        for index in list(self._json):
            self._close(index)
        self._settle()
        native = {**self._message, "content": [self._blocks[i] for i in sorted(self._blocks)],
                  "stop_reason": self._stop_reason, "stop_sequence": self._stop_sequence, "usage": self._usage}
        return self._malformed.check(response_from_message(native))
