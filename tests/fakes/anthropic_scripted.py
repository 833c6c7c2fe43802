"""A scripted fake Anthropic Messages server that records everything a client sends.

Built to pin down what Claude Code (the real CLI) puts on the wire, and reused by the harness test
that proves ``tests/e2e/claude_code.py`` can drive it: every request is recorded (method, path,
query, headers with the credentials redacted, JSON body) and ``POST /v1/messages`` is answered by
a *script*, a function of the recorded request, in the shape the request asks for: Anthropic SSE
when the body says ``"stream": true``, one JSON message otherwise. Any other path answers 404 in
Anthropic's error shape, so an unexpected call is both visible in the record and harmless.

The script can also answer with an HTTP error or a mid-stream ``error`` event, to see how the
client reacts (retries, what it prints) without a real provider.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.threaded import ThreadedApp

#: headers whose values are credentials: the record keeps the scheme word only ("Bearer <redacted>")
SECRET_HEADERS = frozenset({"x-api-key", "authorization", "proxy-authorization", "cookie"})
REDACTED = "<redacted>"


@dataclass(frozen=True)
class Recorded:
    """One request as it arrived; ``body`` is the parsed JSON, or the raw text when it is not JSON."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: Any

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TextReply:
    """An assistant turn with one text block (``stop_reason: end_turn``)."""

    text: str


@dataclass(frozen=True)
class ToolUseReply:
    """An assistant turn that calls one tool (``stop_reason: tool_use``)."""

    name: str
    input: dict[str, Any]
    id: str = "toolu_01ScriptedBashCall0000"
    text: str = ""  # a text block before the tool call, when not empty


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error in Anthropic's shape, e.g. 529 ``overloaded_error`` or 429 ``rate_limit_error``."""

    status: int
    error_type: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)  # e.g. {"retry-after": "0"}


@dataclass(frozen=True)
class StreamErrorReply:
    """A 200 stream that starts a text block, then sends an ``error`` event and ends (no ``message_stop``)."""

    error_type: str = "overloaded_error"
    message: str = "Overloaded"
    partial_text: str = "Work"


Reply = TextReply | ToolUseReply | ErrorReply | StreamErrorReply
Script = Callable[[Recorded], Reply]


def redact(headers: dict[str, str]) -> dict[str, str]:
    """Header names lower-cased, credential values replaced (keeping ``Bearer`` so the scheme shows)."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        key = name.lower()
        if key in SECRET_HEADERS:
            scheme = value.split(" ", 1)[0] if " " in value else ""
            value = f"{scheme} {REDACTED}" if scheme else REDACTED
        out[key] = value
    return out


def last_turn(body: Any) -> dict[str, Any] | None:
    """The last user or assistant message: Claude Code appends ``role: system`` messages after it (reminders)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    turns = [message for message in messages or [] if isinstance(message, dict) and message.get("role") != "system"]
    return turns[-1] if turns else None


def has_tool_result(body: Any, containing: str = "") -> bool:
    """Whether the last turn is a user turn carrying a ``tool_result`` (whose content holds ``containing``)."""
    turn = last_turn(body)
    if turn is None or turn.get("role") != "user" or not isinstance(turn.get("content"), list):
        return False
    return any(block.get("type") == "tool_result" and containing in orjson.dumps(block.get("content")).decode()
               for block in turn["content"] if isinstance(block, dict))


def offers_tool(body: Any, name: str) -> bool:
    """Whether the request's ``tools`` include one called ``name`` (what tells a main turn from a side call)."""
    tools = body.get("tools") if isinstance(body, dict) else None
    return any(isinstance(tool, dict) and tool.get("name") == name for tool in tools or [])


def bash_then_done(command: str = "echo loopgate-ok", done_text: str = "All done: loopgate-ok",
                   side_text: str = "Loopgate check") -> Script:
    """The Claude Code script: a turn offering ``Bash`` runs ``command``; the one with its result gets ``done_text``.

    Anything else (title generation, quota probes and other small-model side calls, which carry no
    ``Bash`` tool) gets ``side_text``.
    """

    def script(seen: Recorded) -> Reply:
        if has_tool_result(seen.body):
            return TextReply(done_text)
        if offers_tool(seen.body, "Bash"):
            return ToolUseReply("Bash", {"command": command, "description": "print"})
        return TextReply(side_text)

    return script


def _usage(output_tokens: int) -> dict[str, int]:
    return {"input_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
            "output_tokens": output_tokens}


def _blocks(reply: TextReply | ToolUseReply) -> list[dict[str, Any]]:
    if isinstance(reply, TextReply):
        return [{"type": "text", "text": reply.text}]
    text = [{"type": "text", "text": reply.text}] if reply.text else []
    return [*text, {"type": "tool_use", "id": reply.id, "name": reply.name, "input": reply.input}]


def message_json(reply: TextReply | ToolUseReply, model: str, message_id: str) -> dict[str, Any]:
    """The non-streaming Messages response for ``reply``."""
    return {"id": message_id, "type": "message", "role": "assistant", "model": model, "content": _blocks(reply),
            "stop_reason": "tool_use" if isinstance(reply, ToolUseReply) else "end_turn", "stop_sequence": None,
            "usage": _usage(5)}


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def message_events(reply: TextReply | ToolUseReply | StreamErrorReply, model: str, message_id: str) -> list[bytes]:
    """The SSE events the real API sends for ``reply``, in order (deltas split in two, as real ones are)."""
    start: dict[str, Any] = {"id": message_id, "type": "message", "role": "assistant", "model": model, "content": [],
             "stop_reason": None, "stop_sequence": None, "usage": _usage(1)}
    events = [_event("message_start", {"type": "message_start", "message": start}), _event("ping", {"type": "ping"})]
    if isinstance(reply, StreamErrorReply):
        return [*events,
                _event("content_block_start", {"type": "content_block_start", "index": 0,
                                               "content_block": {"type": "text", "text": ""}}),
                _event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": reply.partial_text}}),
                _event("error", {"type": "error", "error": {"type": reply.error_type, "message": reply.message}})]
    for index, block in enumerate(_blocks(reply)):
        if block["type"] == "text":
            empty: dict[str, Any] = {"type": "text", "text": ""}
            half = len(block["text"]) // 2
            deltas = [{"type": "text_delta", "text": part} for part in (block["text"][:half], block["text"][half:])]
        else:
            empty = {**block, "input": {}}
            arguments = orjson.dumps(block["input"]).decode()
            half = len(arguments) // 2
            deltas = [{"type": "input_json_delta", "partial_json": part}
                      for part in (arguments[:half], arguments[half:])]
        events.append(_event("content_block_start", {"type": "content_block_start", "index": index,
                                                     "content_block": empty}))
        events += [_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
                   for delta in deltas]
        events.append(_event("content_block_stop", {"type": "content_block_stop", "index": index}))
    stop = "tool_use" if isinstance(reply, ToolUseReply) else "end_turn"
    return [*events,
            _event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": 5}}),
            _event("message_stop", {"type": "message_stop"})]


def error_json(error_type: str, message: str) -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": error_type, "message": message}})


class ScriptedAnthropic(ThreadedApp):
    """The fake: ``requests`` is every request in arrival order (thread-safe to read after the client exits)."""

    def __init__(self, script: Script | None = None) -> None:
        super().__init__()
        self.script: Script = script or bash_then_done()
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def start(self) -> ScriptedAnthropic:
        super().start()
        return self

    def build(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    def messages_requests(self) -> list[Recorded]:
        """The ``POST /v1/messages`` requests only (what the scripts answered)."""
        return [seen for seen in self.requests if seen.method == "POST" and seen.path == "/v1/messages"]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body: Any = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = raw.decode(errors="replace")
        seen = Recorded(request.method, request.path, request.query_string, redact(dict(request.headers)), body)
        with self._lock:
            self.requests.append(seen)
            number = next(self._ids)
        if request.method == "HEAD":
            return web.Response(status=200)
        if request.method != "POST" or request.path != "/v1/messages" or not isinstance(body, dict):
            return web.Response(status=404, content_type="application/json",
                                body=error_json("not_found_error", f"{request.method} {request.path} not scripted"))
        reply = self.script(seen)
        model = str(body.get("model", "claude-fake"))
        message_id = f"msg_scripted{number:04d}"
        if isinstance(reply, ErrorReply):
            return web.Response(status=reply.status, content_type="application/json", headers=reply.headers,
                                body=error_json(reply.error_type, reply.message))
        if not body.get("stream"):
            if isinstance(reply, StreamErrorReply):
                return web.Response(status=529, content_type="application/json",
                                    body=error_json(reply.error_type, reply.message))
            return web.Response(content_type="application/json", body=orjson.dumps(message_json(reply, model,
                                                                                                message_id)))
        response = web.StreamResponse(headers={"content-type": "text/event-stream", "cache-control": "no-cache",
                                               "request-id": f"req_scripted{number:04d}"})
        await response.prepare(request)
        for event in message_events(reply, model, message_id):
            await response.write(event)
        await response.write_eof()
        return response
