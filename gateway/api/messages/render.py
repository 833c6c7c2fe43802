"""The loop's events as one Anthropic ``message``, built block by block, or as its event stream.

One builder serves both modes (``emit``: the stream's frames are produced too), so a caller gets
the same blocks either way. Text from several model calls is one text block joined by a blank
line, as on chat completions, unless a thinking block comes between. A thinking block is closed
by its provider's signature (``ReasoningSignature``: Anthropic's, replayed byte for byte) or,
for reasoning of another format, by one the gateway issues (``signature``). The calls handed to
the caller (its own tools) are ``tool_use`` blocks at the end; server tools never are, unless
the caller asked for the ``mcp-client`` beta (``mcp_tool_use`` / ``mcp_tool_result``). While
tools run and the context guard works, the stream sends ``ping`` (the SDKs skip it) to stay alive.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.api.messages import signature
from gateway.api.messages.blocks import SERVER_NAME
from gateway.canonical import (
    Answering,
    ReasoningDelta,
    ReasoningSignature,
    RedactedReasoning,
    TextDelta,
    Usage,
    arguments_object,
)
from gateway.errors import GatewayError
from gateway.http.sse_response import event_frame
from gateway.loop.events import Finished, LoopEvent, LoopResult, Notice, ToolFinished, ToolProgress, ToolStarted
from gateway.random_ids import random_hex

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}
_ANTHROPIC_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                          404: "not_found_error", 409: "invalid_request_error", 413: "request_too_large",
                          429: "rate_limit_error", 529: "overloaded_error"}
_PING = b'event: ping\ndata: {"type":"ping"}\n\n'


def message_id() -> str:
    """128 random bits: ids cannot be enumerated (batched CSPRNG, no system call per request)."""
    return "msg_" + random_hex(16)


def error_type(status: int, code: str | None = None) -> str:
    """The Anthropic error type of a status (the SDKs pick their exception class by status)."""
    if code == "upstream_overloaded":
        return "overloaded_error"
    return _ANTHROPIC_ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_payload(error: GatewayError, request_id: str | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = {"type": "error", "error": {"type": error_type(error.status, error.code),
                                                          "message": error.message}}
    if request_id:
        payload["request_id"] = request_id
    return payload


def _frame(event: str, data: dict[str, Any]) -> bytes:
    return event_frame(event, orjson.dumps(data))


def error_frame(error: GatewayError) -> bytes:
    return _frame("error", error_payload(error))


def anthropic_usage(usage: Usage) -> dict[str, Any]:
    """Anthropic counts input without the cached part (read and written); the canonical prompt count holds both."""
    written = usage.cache_creation_tokens
    return {"input_tokens": max(0, usage.prompt_tokens - usage.cached_tokens - written),
            "output_tokens": usage.completion_tokens,
            "cache_creation_input_tokens": written, "cache_read_input_tokens": usage.cached_tokens}


class MessageBuilder:
    """Feeds on loop events; ``content`` is the message's blocks, ``feed`` returns the frames to send."""

    __slots__ = ("_open", "_open_kind", "_said_reasoning", "_text", "_thinking", "content", "emit", "id", "model",
                 "result", "route", "show_server_tools")

    def __init__(self, model: str, route: str, emit: bool, show_server_tools: bool) -> None:
        self.id = message_id()
        self.model = model
        self.route = route
        self.emit = emit
        self.show_server_tools = show_server_tools
        self.content: list[dict[str, Any]] = []
        self.result: LoopResult | None = None
        self._open: dict[str, Any] | None = None
        self._open_kind = ""
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._said_reasoning = False  # a thinking block of this call had text: the next one's "\n\n" joiner is ours

    # -- the stream's head ---------------------------------------------------------------------
    def start(self) -> bytes:
        message: dict[str, Any] = {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0}}
        return _frame("message_start", {"type": "message_start", "message": message})

    # -- blocks ----------------------------------------------------------------------------------
    def _begin(self, block: dict[str, Any], out: list[bytes]) -> int:
        index = len(self.content)
        self.content.append(block)
        if self.emit:
            out.append(_frame("content_block_start", {"type": "content_block_start", "index": index,
                                                      "content_block": block}))
        return index

    def _delta(self, delta: dict[str, Any], out: list[bytes]) -> None:
        if self.emit:
            out.append(_frame("content_block_delta", {"type": "content_block_delta", "index": len(self.content) - 1,
                                                      "delta": delta}))

    def _stop(self, out: list[bytes]) -> None:
        if self.emit:
            out.append(_frame("content_block_stop", {"type": "content_block_stop", "index": len(self.content) - 1}))

    def _close(self, out: list[bytes], given: str | None = None) -> None:
        """Close the open block; a thinking block gets ``given`` (its provider's signature) or the gateway's."""
        block, kind = self._open, self._open_kind
        if block is None:
            return
        self._open, self._open_kind = None, ""
        if kind == "text":
            block["text"] = "".join(self._text)
            self._text = []
        else:
            text = block["thinking"] = "".join(self._thinking)
            self._thinking = []
            block["signature"] = given if given is not None else signature.issue(text)
            self._delta({"type": "signature_delta", "signature": block["signature"]}, out)
        self._stop(out)

    def _on_text(self, text: str, out: list[bytes]) -> None:
        if self._open_kind != "text":
            self._close(out)
            self._open, self._open_kind = {"type": "text", "text": ""}, "text"
            self._begin(self._open, out)
        self._text.append(text)
        self._delta({"type": "text_delta", "text": text}, out)

    def _on_reasoning(self, text: str, out: list[bytes]) -> None:
        if self._open_kind != "thinking":
            self._close(out)
            if self._said_reasoning and text.startswith("\n\n"):
                text = text[2:]  # the joiner between two blocks of one answer, not the new block's text
            self._open, self._open_kind = {"type": "thinking", "thinking": "", "signature": ""}, "thinking"
            self._begin(self._open, out)
        self._said_reasoning = True
        self._thinking.append(text)
        if text:
            self._delta({"type": "thinking_delta", "thinking": text}, out)

    def _on_signature(self, given: str, out: list[bytes]) -> None:
        if self._open_kind != "thinking":  # a block with no text (display omitted): opened and closed here
            self._close(out)
            self._open, self._open_kind = {"type": "thinking", "thinking": "", "signature": ""}, "thinking"
            self._begin(self._open, out)
        self._close(out, given)

    def _on_redacted(self, data: str, out: list[bytes]) -> None:
        self._close(out)
        self._begin({"type": "redacted_thinking", "data": data}, out)
        self._stop(out)

    # -- server tools ----------------------------------------------------------------------------
    def _on_tool(self, event: ToolStarted | ToolFinished, out: list[bytes]) -> None:
        if not self.show_server_tools:
            if self.emit:
                out.append(_PING)  # a tool may run long with nothing to say: the connection stays warm
            return
        self._close(out)
        if isinstance(event, ToolStarted):
            block: dict[str, Any] = {"type": "mcp_tool_use", "id": event.tool_call_id, "name": event.name,
                                     "server_name": SERVER_NAME, "input": _input_of(event.arguments)}
        else:
            block = {"type": "mcp_tool_result", "tool_use_id": event.tool_call_id, "is_error": event.status != "ok",
                     "content": [{"type": "text", "text": event.content}]}
        self._begin(block, out)
        self._stop(out)

    # -- the end ---------------------------------------------------------------------------------
    def _on_finished(self, result: LoopResult, out: list[bytes]) -> None:
        self._close(out)
        self.result = result
        if result.model:
            self.model = result.model
        handed = _client_calls(result)
        for call in handed:
            arguments = call["function"]["arguments"]
            block = {"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                     "input": {} if self.emit else _input_of(arguments)}
            self._begin(block, out)
            if self.emit:
                self._delta({"type": "input_json_delta", "partial_json": orjson.dumps(_input_of(arguments)).decode()},
                            out)
                block["input"] = _input_of(arguments)
            self._stop(out)
        if self.emit:
            delta = {"stop_reason": self.stop_reason(), "stop_sequence": self.stop_sequence()}
            out.append(_frame("message_delta", {"type": "message_delta", "delta": delta,
                                                "usage": anthropic_usage(result.usage), "gateway": self.gateway()}))
            out.append(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')

    def stop_reason(self) -> str:
        result = self.result
        assert result is not None, "the loop ended without a result"
        if result.status == "paused":
            return "tool_use" if _client_calls(result) else "end_turn"
        if self.stop_sequence() is not None:
            return "stop_sequence"
        return STOP_REASONS.get(result.finish_reason, "end_turn")

    def stop_sequence(self) -> str | None:
        """The caller's stop sequence the answer ended on: only when the provider said which (Anthropic does;
        OpenAI's and Gemini's ``stop`` cannot tell a matched sequence from a natural end)."""
        result = self.result
        assert result is not None, "the loop ended without a result"
        if result.status != "completed" or result.finish_reason != "stop":
            return None
        return result.stop_sequence

    def gateway(self) -> dict[str, Any]:
        assert self.result is not None
        return {"route": self.route, **self.result.gateway}

    def feed(self, event: LoopEvent) -> list[bytes]:
        out: list[bytes] = []
        items: Any = event if event.__class__ is list else (event,)
        for item in items:
            cls = item.__class__
            if cls is TextDelta:
                self._on_text(item.text, out)
            elif cls is ReasoningDelta:
                self._on_reasoning(item.text, out)
            elif cls is ReasoningSignature:
                self._on_signature(item.signature, out)
            elif cls is Answering:
                self._said_reasoning = False  # a new model call
                self.model = item.model
            elif cls is RedactedReasoning:
                self._on_redacted(item.data, out)
            elif cls is ToolStarted or cls is ToolFinished:
                self._on_tool(item, out)
            elif cls is Finished:
                self._on_finished(item.result, out)
            elif (cls is Notice or cls is ToolProgress) and self.emit:
                out.append(_PING)
        return out

    def message(self) -> dict[str, Any]:
        """The whole message (after ``Finished``)."""
        assert self.result is not None, "the loop ended without a result"
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model or self.route,
                "content": self.content, "stop_reason": self.stop_reason(), "stop_sequence": self.stop_sequence(),
                "usage": anthropic_usage(self.result.usage), "gateway": self.gateway()}


def _client_calls(result: LoopResult) -> list[dict[str, Any]]:
    """The handed calls the caller runs itself; an approval-pending server call is the inbox's, not the caller's."""
    if result.status != "paused":
        return result.tool_calls
    reasons = {p["tool_call_id"]: p["reason"] for p in result.gateway.get("pending") or ()}
    return [call for call in result.tool_calls if reasons.get(call["id"], "client") == "client"]


def _input_of(arguments: Any) -> dict[str, Any]:
    try:
        return arguments_object(arguments)
    except ValueError:
        return {}
