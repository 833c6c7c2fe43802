"""A scripted fake OpenAI Responses server that records everything a client sends.

Built to pin down what Codex CLI (the real binary) puts on the wire, the way ``anthropic_scripted``
does for Claude Code: every request is recorded (method, path, query, headers with credentials
redacted, JSON body) and ``POST /v1/responses`` is answered by a *script*, a function of the
recorded request, as Responses SSE when the body says ``"stream": true`` and one JSON response
otherwise. ``POST /v1/responses/compact`` answers with one opaque compaction item, as OpenAI's
does. Any other path answers 404 in OpenAI's error shape, so an unexpected call is visible in the
record and harmless (a WebSocket upgrade included: the client falls back to HTTP).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.anthropic_scripted import Recorded, redact
from tests.fakes.threaded import ThreadedApp


@dataclass(frozen=True)
class TextReply:
    """A turn ending with one assistant message."""

    text: str
    input_tokens: int = 40  # the usage reported: Codex compacts when input + output passes its limit


@dataclass(frozen=True)
class CallReply:
    """A turn calling one function tool (``arguments`` is sent as its JSON text)."""

    name: str
    arguments: dict[str, Any]
    call_id: str = "call_scripted0001"
    namespace: str | None = None  # Codex's namespace tools: the call names its namespace too
    input_tokens: int = 40


@dataclass(frozen=True)
class CompactionReply:
    """The answer to a ``compaction_trigger`` item (Codex's remote compaction v2): one opaque ``compaction`` item."""

    summary: str = "scripted-summary"
    input_tokens: int = 40


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error in OpenAI's shape."""

    status: int
    message: str
    error_type: str = "server_error"


Reply = TextReply | CallReply | CompactionReply | ErrorReply
Script = Callable[[Recorded], Reply]


def input_items(body: Any) -> list[dict[str, Any]]:
    items = body.get("input") if isinstance(body, dict) else None
    return [item for item in items or [] if isinstance(item, dict)] if isinstance(items, list) else []


def asks_compaction(body: Any) -> bool:
    """Whether the input ends with Codex's ``compaction_trigger`` item (remote compaction v2 on ``/responses``)."""
    items = input_items(body)
    return bool(items) and items[-1].get("type") == "compaction_trigger"


def has_call_output(body: Any, containing: str = "") -> bool:
    """Whether the input ends with tool outputs, one holding ``containing``."""
    outputs = [item for item in input_items(body) if str(item.get("type", "")).endswith("call_output")]
    return any(containing in orjson.dumps(item.get("output")).decode() for item in outputs)


def tool_names(body: Any) -> set[str]:
    """Every tool name offered, a namespace's members as ``namespace.name`` too."""
    names: set[str] = set()
    for tool in body.get("tools") or [] if isinstance(body, dict) else []:
        if not isinstance(tool, dict):
            continue
        names.add(str(tool.get("name") or tool.get("type")))
        for member in tool.get("tools") or []:
            if isinstance(member, dict):
                names.add(f"{tool.get('name')}.{member.get('name')}")
    return names


def _usage(input_tokens: int) -> dict[str, Any]:
    return {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 6,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": input_tokens + 6}


def output_item(reply: TextReply | CallReply | CompactionReply, number: int) -> dict[str, Any]:
    if isinstance(reply, CompactionReply):
        return {"id": f"cmp_scripted{number:04d}", "type": "compaction",
                "encrypted_content": f"{reply.summary}-{number}"}
    if isinstance(reply, TextReply):
        return {"id": f"msg_scripted{number:04d}", "type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}]}
    item = {"id": f"fc_scripted{number:04d}", "type": "function_call", "status": "completed",
            "call_id": reply.call_id, "name": reply.name, "arguments": orjson.dumps(reply.arguments).decode()}
    if reply.namespace:
        item["namespace"] = reply.namespace
    return item


def response_json(reply: TextReply | CallReply | CompactionReply, model: str, number: int,
                  status: str = "completed") -> dict[str, Any]:
    done = status == "completed"
    return {"id": f"resp_scripted{number:04d}", "object": "response", "created_at": 1_700_000_000 + number,
            "status": status, "model": model, "output": [output_item(reply, number)] if done else [],
            "usage": _usage(reply.input_tokens) if done else None, "error": None, "incomplete_details": None}


def _event(payload: dict[str, Any]) -> bytes:
    return b"event: " + payload["type"].encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def response_events(reply: TextReply | CallReply | CompactionReply, model: str, number: int) -> list[bytes]:
    """The SSE events OpenAI sends for one output item, deltas split in two as real ones are."""
    item = output_item(reply, number)
    seq = itertools.count()
    started = response_json(reply, model, number, status="in_progress")
    events = [{"type": "response.created", "response": started},
              {"type": "response.in_progress", "response": started}]
    if isinstance(reply, TextReply):
        empty = {**item, "status": "in_progress", "content": []}
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        half = len(reply.text) // 2
        where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        events += [{"type": "response.output_item.added", "output_index": 0, "item": empty},
                   {"type": "response.content_part.added", **where, "part": part},
                   *({"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []}
                     for piece in (reply.text[:half], reply.text[half:])),
                   {"type": "response.output_text.done", **where, "text": reply.text, "logprobs": []},
                   {"type": "response.content_part.done", **where, "part": item["content"][0]}]
    elif isinstance(reply, CompactionReply):
        events.append({"type": "response.output_item.added", "output_index": 0, "item": item})
    else:
        half = len(item["arguments"]) // 2
        where = {"item_id": item["id"], "output_index": 0}
        events += [{"type": "response.output_item.added", "output_index": 0,
                    "item": {**item, "status": "in_progress", "arguments": ""}},
                   *({"type": "response.function_call_arguments.delta", **where, "delta": piece}
                     for piece in (item["arguments"][:half], item["arguments"][half:])),
                   {"type": "response.function_call_arguments.done", **where, "arguments": item["arguments"]}]
    events += [{"type": "response.output_item.done", "output_index": 0, "item": item},
               {"type": "response.completed", "response": response_json(reply, model, number)}]
    return [_event({**event, "sequence_number": next(seq)}) for event in events]


def compaction_json(number: int) -> dict[str, Any]:
    """``/responses/compact``'s answer: the input replaced by one opaque item the client sends back later."""
    return {"id": f"resp_compact{number:04d}", "object": "response.compaction", "created_at": 1_700_000_000 + number,
            "output": [{"id": f"cmp_scripted{number:04d}", "type": "compaction",
                        "encrypted_content": f"scripted-summary-{number}"}],
            "usage": _usage(40)}


def error_json(status: int, message: str, error_type: str) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": error_type, "param": None, "code": str(status)}})


class ScriptedResponses(ThreadedApp):
    """The fake: ``requests`` is every request in arrival order (thread-safe to read after the client exits)."""

    def __init__(self, script: Script) -> None:
        super().__init__()
        self.script = script
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def start(self) -> ScriptedResponses:
        super().start()
        return self

    def build(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    def posts(self, path: str = "/v1/responses") -> list[Recorded]:
        return [seen for seen in self.requests if seen.method == "POST" and seen.path == path]

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
        if request.method == "POST" and request.path.endswith("/responses/compact") and isinstance(body, dict):
            return web.json_response(compaction_json(number), dumps=lambda value: orjson.dumps(value).decode())
        if request.method != "POST" or not request.path.endswith("/responses") or not isinstance(body, dict):
            return web.Response(status=404, content_type="application/json",
                                body=error_json(404, f"{request.method} {request.path} not scripted",
                                                "invalid_request_error"))
        reply = self.script(seen)
        if isinstance(reply, ErrorReply):
            return web.Response(status=reply.status, content_type="application/json",
                                body=error_json(reply.status, reply.message, reply.error_type))
        model = str(body.get("model", "fake-model"))
        if not body.get("stream"):
            return web.Response(content_type="application/json", body=orjson.dumps(response_json(reply, model,
                                                                                                 number)))
        response = web.StreamResponse(headers={"content-type": "text/event-stream", "cache-control": "no-cache",
                                               "x-request-id": f"req_scripted{number:04d}"})
        await response.prepare(request)
        for event in response_events(reply, model, number):
            await response.write(event)
        await response.write_eof()
        return response
