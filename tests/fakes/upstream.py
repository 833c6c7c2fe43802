"""A scriptable fake LLM provider speaking OpenAI, Anthropic or Gemini over real HTTP.

It runs an aiohttp server on 127.0.0.1 in a background thread, so the gateway under test (a
real uvicorn subprocess) talks to it exactly as to a real provider. Each test queues
``Reply`` objects; every request body is recorded, and a strict ``rules`` function (pairing,
Anthropic or Gemini validation) can reject bad requests with a 400 like the real server.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from aiohttp import web

from tests.fakes import embeddings
from tests.fakes.embeddings import is_embeddings
from tests.fakes.threaded import ThreadedApp

Rules = Callable[[dict[str, Any], str], list[str]]


#: numbers each fake's life between resets (its tool-call ids carry it)
_EPOCHS = itertools.count(1)


@dataclass
class Reply:
    text: str = ""
    tool_calls: list[tuple[str, Any]] = field(default_factory=list)  # (name, arguments dict or raw string)
    reasoning: str = ""
    status: int = 200
    error_body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    # cut: stream breaks after the first text chunk (non-stream: connection closed mid-body);
    # stall: stream stops after the first text chunk (non-stream: no answer at all);
    # error_event: 200 then an in-stream error before any content (non-stream: a 200 error body);
    # invalid_json: a body/chunk that is not JSON; reset: connection closed before any response;
    # wrong_shape: JSON of the wrong shape (non-stream: the whole body; stream: every event);
    # malformed_event: a stream with an unreadable event in the middle (non-stream: no fault);
    # malformed_content: a stream whose every event carrying the text is cut short, unreadable (the rest,
    # the finish event included, is valid; non-stream: no fault); cut_in_call: a stream breaks half-way
    # through its first tool call's arguments (after all its text).
    fault: str | None = None
    # the ids of the tool calls (OpenAI wire, not streamed): an upstream that repeats ids; None: call_<n>_<i>
    call_ids: list[str] | None = None
    # (prompt, completion); None reports a plausible prompt size (a third of the request's bytes)
    # so a gateway calibrating its token estimates against usage is not misled.
    usage: tuple[int, int] | None = None
    finish: str | None = None  # override the native finish/stop reason
    stop_sequence: str | None = None  # Anthropic wire: the stop sequence matched (with finish="stop_sequence")
    cached: int = 0  # cached prompt tokens (OpenAI wire: usage.prompt_tokens_details.cached_tokens)
    # A stream's text in this many pieces (one event each); cut / stall strike after ``cut_after`` of them.
    pieces: int = 2
    cut_after: int = 1
    # A stream's head is sent at once, its first event only after this long (a first token that is late).
    first_delay_s: float = 0.0
    # The answer waits until the test sets this (at most HOLD_MAX_S): "still running" as a condition the
    # test ends, where a delay_s is a window a busy machine can outrun.
    hold: threading.Event | None = None
    # Web searches the provider ran itself before its text (Anthropic: server_tool_use and web_search_tool_result
    # blocks; Gemini: groundingMetadata, with toolCall / toolResponse parts): (query, [url, ...]) each.
    web_search: list[tuple[str, list[str]]] = field(default_factory=list)


HOLD_MAX_S = 60.0


async def _wait(reply: Reply) -> None:
    if reply.delay_s:
        await asyncio.sleep(reply.delay_s)
    if reply.hold is not None:
        deadline = time.monotonic() + HOLD_MAX_S
        while not reply.hold.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)


def count_of(body: dict[str, Any]) -> int:
    """The fake Anthropic token count of a count_tokens body (a test computes the same)."""
    return 7 + len(orjson.dumps({k: body.get(k) for k in ("system", "messages", "tools")})) // 4


def gemini_count_of(body: dict[str, Any]) -> int:
    """The fake Gemini token count of a countTokens body (a test computes the same)."""
    request = body.get("generateContentRequest") or {}
    return 5 + len(orjson.dumps({k: request.get(k) for k in ("systemInstruction", "contents", "tools")})) // 4


@dataclass
class Recorded:
    path: str
    body: dict[str, Any]
    problems: list[str]
    headers: dict[str, str] = field(default_factory=dict)  # lower-cased names


class FakeUpstream(ThreadedApp):
    def __init__(self, wire: str = "openai", rules: Rules | None = None) -> None:
        super().__init__()
        self.wire = wire
        self.rules = rules
        self.requests: list[Recorded] = []
        self.script: deque[Reply] = deque()
        self.default = Reply(text="ok")
        self._ids = itertools.count(1)
        self._epoch = next(_EPOCHS)
        self.in_flight = 0
        self.cancelled = 0
        # Answer a request that ends with an assistant (Gemini: model) turn with a 400, as recent Claude models do.
        self.reject_prefill = False

    def build(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("POST", "/{tail:.*}", self._handle)
        return app

    def reset(self) -> None:
        self.requests.clear()
        self.script.clear()
        self.cancelled = 0
        self.reject_prefill = False
        self._ids = itertools.count(1)
        # Tool-call ids stay unique across resets, as a real upstream's: a test's paused calls must not share ids
        # with a pause another test left in the same tenant (way A resolves an id two continuations share to none).
        self._epoch = next(_EPOCHS)

    def queue(self, *replies: Reply) -> None:
        self.script.extend(replies)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests]

    # -- serving ---------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        path = request.path
        if path.endswith("/messages/count_tokens"):  # Anthropic's counter: a number from the body's size
            self.requests.append(Recorded(path, body, [], {n.lower(): v for n, v in request.headers.items()}))
            return web.json_response({"input_tokens": count_of(body)})
        if path.endswith(":countTokens"):  # Gemini's counter: the same, from the request it would generate for
            self.requests.append(Recorded(path, body, [], {n.lower(): v for n, v in request.headers.items()}))
            return web.json_response({"totalTokens": gemini_count_of(body)})
        if is_embeddings(path):
            return await self._embeddings(request, body, path)
        model = body.get("model") or path.split("/models/")[-1].split(":")[0]
        stream = bool(body.get("stream")) or "streamGenerateContent" in path
        problems = self.rules(body, model) if self.rules else []
        self.requests.append(Recorded(path, body, problems,
                                      {name.lower(): value for name, value in request.headers.items()}))
        reply = self.script.popleft() if self.script else self.default
        if reply.usage is None:
            reply = replace(reply, usage=(max(1, len(orjson.dumps(body)) // 3), 5))
        if problems:
            return web.json_response(self._error_payload(400, "; ".join(problems)), status=400)
        if self.reject_prefill and _ends_with_prefill(body):
            return web.json_response(self._error_payload(400, "This model does not support assistant message "
                                                         "prefill. The conversation must end with a user message."),
                                     status=400)
        await _wait(reply)
        if reply.fault == "reset":
            request.transport.close()  # type: ignore[union-attr]
            return web.Response(status=500)
        if reply.status != 200:
            payload = reply.error_body if reply.error_body is not None else self._error_payload(reply.status, "boom")
            return web.Response(body=orjson.dumps(payload), status=reply.status, headers=reply.headers,
                                content_type="application/json")
        n = next(self._ids)
        if not stream:
            if reply.fault == "invalid_json":
                return web.Response(body=b"{not json", content_type="application/json")
            if reply.fault == "wrong_shape":
                return web.Response(body=orjson.dumps(self._wrong_shape()), content_type="application/json")
            if reply.fault == "error_event":  # a 200 whose body is the provider's error object
                return web.Response(body=self._stream_error().split(b"data: ", 1)[1].strip(),
                                    content_type="application/json")
            if reply.fault == "stall":
                await asyncio.sleep(30)
            raw = orjson.dumps(self._whole(reply, model, n))
            if reply.fault == "cut":
                response = web.StreamResponse(headers={"content-type": "application/json",
                                                       "content-length": str(len(raw))})
                await response.prepare(request)
                await response.write(raw[: len(raw) // 2])
                request.transport.close()  # type: ignore[union-attr]
                return response
            return web.Response(body=raw, content_type="application/json")
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        self.in_flight += 1
        try:
            frames = self._frames(reply, model, n)
            if reply.fault == "error_event":
                frames = [self._stream_error()]
            elif reply.fault == "invalid_json":
                frames = [b"data: {broken\n\n"]
            elif reply.fault == "wrong_shape":
                frames = [b"data: " + orjson.dumps(self._wrong_shape(True)) + b"\n\n"] * 3
            elif reply.fault == "malformed_event":
                middle = len(frames) // 2
                frames = [*frames[:middle], b"data: {broken\n\n", b"data: " + orjson.dumps(self._wrong_shape(True))
                          + b"\n\n", *frames[middle:]]
            elif reply.fault == "malformed_content":
                pieces = [orjson.dumps(piece)[1:-1] for piece in self._split(reply.text, reply.pieces)]
                frames = [frame[:len(frame) // 2] + b"\n\n" if any(p in frame for p in pieces) else frame
                          for frame in frames]
            texts = [orjson.dumps(piece)[1:-1] for piece in self._split(reply.text, reply.pieces)]
            seen = 0
            half_call = (orjson.dumps(self._halves(self._args(reply.tool_calls[0][1])[0])[0])[1:-1]
                         if reply.tool_calls else b"\x00")
            if reply.first_delay_s:
                await asyncio.sleep(reply.first_delay_s)
            for frame in frames:
                await response.write(frame)
                await asyncio.sleep(0.002)
                if seen < len(texts) and texts[seen] in frame:
                    seen += 1
                # cut_in_call: the connection breaks once the first tool call's arguments are half sent.
                if reply.fault == "cut_in_call" and reply.tool_calls and seen == len(texts) and half_call in frame:
                    request.transport.close()  # type: ignore[union-attr]
                    return response
                # cut / stall strike right after the ``cut_after``-th frame carrying model text.
                if reply.fault in ("cut", "stall") and seen == reply.cut_after and texts and texts[seen - 1] in frame:
                    if reply.fault == "stall":
                        await asyncio.sleep(30)
                    request.transport.close()  # type: ignore[union-attr]
                    return response
            await response.write_eof()
        except (asyncio.CancelledError, ConnectionResetError):
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1
        return response

    async def _embeddings(self, request: web.Request, body: dict[str, Any], path: str) -> web.Response:
        """An embeddings call: scripted faults and errors as for chat, else vectors (tests/fakes/embeddings.py)."""
        problems = embeddings.gemini_problems(body, path) if self.wire == "gemini" else []
        self.requests.append(Recorded(path, body, problems, {n.lower(): v for n, v in request.headers.items()}))
        reply = self.script.popleft() if self.script else self.default
        if problems:
            return web.json_response(self._error_payload(400, "; ".join(problems)), status=400)
        await _wait(reply)
        if reply.status != 200:
            payload = reply.error_body if reply.error_body is not None else self._error_payload(reply.status, "boom")
            return web.Response(body=orjson.dumps(payload), status=reply.status, headers=reply.headers,
                                content_type="application/json")
        if reply.fault == "wrong_shape":
            return web.json_response({"data": "not a list"} if self.wire == "openai" else {"embedding": 42})
        if self.wire == "gemini":
            return web.json_response(embeddings.gemini_answer(body, path))
        return web.json_response(embeddings.openai_answer(body, reply.usage[0] if reply.usage else None))

    def _error_payload(self, status: int, message: str) -> dict[str, Any]:
        if self.wire == "anthropic":
            kind = {400: "invalid_request_error", 429: "rate_limit_error", 529: "overloaded_error"}.get(status,
                                                                                                         "api_error")
            return {"type": "error", "error": {"type": kind, "message": message}}
        if self.wire == "gemini":
            name = {400: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}.get(status, "INTERNAL")
            return {"error": {"code": status, "message": message, "status": name}}
        return {"error": {"message": message, "type": "invalid_request_error" if status < 500 else "server_error",
                          "param": None, "code": None}}

    def _wrong_shape(self, stream: bool = False) -> dict[str, Any]:
        """A document with the right keys and the wrong types, as a broken compatible server sends."""
        if self.wire == "anthropic" and stream:
            return {"type": "content_block_delta", "index": "0", "delta": "plain text instead of a delta"}
        if self.wire == "anthropic":
            return {"type": "message", "role": "assistant", "content": "plain text instead of blocks"}
        if self.wire == "gemini":
            return {"candidates": [{"content": {"role": "model", "parts": "plain text"}, "index": 0}]}
        return {"choices": {"0": {"message": {"content": 42}}}, "usage": {"prompt_tokens": "many"}}

    def _stream_error(self) -> bytes:
        if self.wire == "anthropic":
            return (b"event: error\ndata: "
                    + orjson.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
                    + b"\n\n")
        if self.wire == "gemini":
            return b"data: " + orjson.dumps({"error": {"code": 503, "message": "overloaded",
                                                       "status": "UNAVAILABLE"}}) + b"\n\n"
        return b"data: " + orjson.dumps({"error": {"message": "overloaded", "type": "server_error",
                                                   "code": "server_is_overloaded"}}) + b"\n\n"

    # -- native payloads -------------------------------------------------------------
    @staticmethod
    def _args(arguments: Any) -> tuple[str, Any]:
        if isinstance(arguments, str):
            try:
                return arguments, orjson.loads(arguments)
            except orjson.JSONDecodeError:
                return arguments, {}
        return orjson.dumps(arguments).decode(), arguments

    def _whole(self, reply: Reply, model: str, n: int) -> dict[str, Any]:
        prompt, completion = reply.usage
        if self.wire == "anthropic":
            content: list[dict[str, Any]] = []
            if reply.reasoning:
                content.append({"type": "thinking", "thinking": reply.reasoning, "signature": f"sig-{n}"})
            content += self._anthropic_searches(reply, n)
            if reply.text:
                content.append({"type": "text", "text": reply.text})
            for i, (name, args) in enumerate(reply.tool_calls):
                content.append({"type": "tool_use", "id": f"toolu_{self._epoch}_{n}_{i}", "name": name,
                                "input": self._args(args)[1]})
            stop = reply.finish or ("tool_use" if reply.tool_calls else "end_turn")
            return {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": model, "content": content,
                    "stop_reason": stop, "stop_sequence": reply.stop_sequence,
                    "usage": {"input_tokens": prompt, "output_tokens": completion}}
        if self.wire == "gemini":
            parts: list[dict[str, Any]] = []
            if reply.reasoning:
                parts.append({"text": reply.reasoning, "thought": True})
            parts += self._gemini_search_parts(reply, n)
            if reply.text:
                parts.append({"text": reply.text})
            for i, (name, args) in enumerate(reply.tool_calls):
                part: dict[str, Any] = {"functionCall": {"name": name, "args": self._args(args)[1]}}
                if i == 0:
                    part["thoughtSignature"] = f"gsig-{n}"
                parts.append(part)
            return {"candidates": [{"content": {"role": "model", "parts": parts},
                                    "finishReason": reply.finish or "STOP", "index": 0,
                                    **self._grounding(reply)}],
                    "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": completion,
                                      "totalTokenCount": prompt + completion},
                    "modelVersion": model, "responseId": f"resp-{self._epoch}-{n}"}
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [{"id": reply.call_ids[i] if reply.call_ids else f"call_{self._epoch}_{n}_{i}",
                                      "type": "function", "function": {"name": name, "arguments": self._args(args)[0]}}
                                     for i, (name, args) in enumerate(reply.tool_calls)]
        finish = reply.finish or ("tool_calls" if reply.tool_calls else "stop")
        return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion,
                          "prompt_tokens_details": {"cached_tokens": reply.cached}}}

    def _anthropic_searches(self, reply: Reply, n: int) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        for i, (query, urls) in enumerate(reply.web_search):
            use_id = f"srvtoolu_{self._epoch}_{n}_{i}"
            blocks.append({"type": "server_tool_use", "id": use_id, "name": "web_search", "input": {"query": query}})
            blocks.append({"type": "web_search_tool_result", "tool_use_id": use_id, "content": [
                {"type": "web_search_result", "url": url, "title": f"Page {j}", "encrypted_content": f"enc-{j}",
                 "page_age": None} for j, url in enumerate(urls)]})
        return blocks

    @staticmethod
    def _gemini_search_parts(reply: Reply, n: int) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        for i, (query, _urls) in enumerate(reply.web_search):
            parts.append({"toolCall": {"id": f"tc-{n}-{i}", "toolType": "GOOGLE_SEARCH_WEB",
                                       "args": {"queries": [query]}}, "thoughtSignature": f"tsig-{n}-{i}"})
            parts.append({"toolResponse": {"id": f"tc-{n}-{i}", "toolType": "GOOGLE_SEARCH_WEB",
                                           "response": {"search_suggestions": "..."}}})
        return parts

    @staticmethod
    def _grounding(reply: Reply) -> dict[str, Any]:
        if not reply.web_search:
            return {}
        return {"groundingMetadata": {
            "webSearchQueries": [query for query, _urls in reply.web_search],
            "groundingChunks": [{"web": {"uri": url, "title": f"Page {j}"}}
                                for _query, urls in reply.web_search for j, url in enumerate(urls)]}}

    def _frames(self, reply: Reply, model: str, n: int) -> list[bytes]:
        if self.wire == "anthropic":
            return self._anthropic_frames(reply, model, n)
        if self.wire == "gemini":
            return self._gemini_frames(reply, model, n)
        return self._openai_frames(reply, model, n)

    @staticmethod
    def _halves(text: str) -> list[str]:
        middle = max(1, len(text) // 2)
        return [piece for piece in (text[:middle], text[middle:]) if piece]

    @classmethod
    def _split(cls, text: str, pieces: int) -> list[str]:
        """``text`` in ``pieces`` consecutive parts (two: ``_halves``)."""
        if pieces == 2:
            return cls._halves(text)
        size = max(1, -(-len(text) // max(1, pieces)))
        return [text[i:i + size] for i in range(0, len(text), size)]

    def _openai_frames(self, reply: Reply, model: str, n: int) -> list[bytes]:
        head = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return b"data: " + orjson.dumps({**head, "choices": [{"index": 0, "delta": delta,
                                                                   "finish_reason": finish}]}) + b"\n\n"

        frames = [chunk({"role": "assistant", "content": ""})]
        frames += [chunk({"reasoning_content": piece}) for piece in self._halves(reply.reasoning)]
        frames += [chunk({"content": piece}) for piece in self._split(reply.text, reply.pieces)]
        for i, (name, args) in enumerate(reply.tool_calls):
            raw = self._args(args)[0]
            frames.append(chunk({"tool_calls": [{"index": i, "id": f"call_{self._epoch}_{n}_{i}", "type": "function",
                                                 "function": {"name": name, "arguments": ""}}]}))
            frames += [chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
                       for piece in self._halves(raw)]
        frames.append(chunk({}, reply.finish or ("tool_calls" if reply.tool_calls else "stop")))
        prompt, completion = reply.usage
        frames.append(b"data: " + orjson.dumps({**head, "choices": [], "usage": {
            "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": reply.cached}}}) + b"\n\n")
        frames.append(b"data: [DONE]\n\n")
        return frames

    def _anthropic_frames(self, reply: Reply, model: str, n: int) -> list[bytes]:
        def event(name: str, payload: dict[str, Any]) -> bytes:
            return f"event: {name}\ndata: ".encode() + orjson.dumps({"type": name, **payload}) + b"\n\n"

        prompt, completion = reply.usage
        frames = [event("message_start", {"message": {"id": f"msg_{n}", "type": "message", "role": "assistant",
                                                      "model": model, "content": [], "stop_reason": None,
                                                      "usage": {"input_tokens": prompt, "output_tokens": 1}}})]
        index = 0
        for block in self._anthropic_searches(reply, n):  # a search's use streams its input, its result is whole
            use = block["type"] == "server_tool_use"
            frames.append(event("content_block_start", {"index": index, "content_block": {**block, "input": {}}
                                                        if use else block}))
            if use:
                frames.append(event("content_block_delta", {"index": index, "delta": {
                    "type": "input_json_delta", "partial_json": orjson.dumps(block["input"]).decode()}}))
            frames.append(event("content_block_stop", {"index": index}))
            index += 1
        if reply.reasoning:
            frames.append(event("content_block_start", {"index": index, "content_block": {
                "type": "thinking", "thinking": "", "signature": ""}}))
            frames += [event("content_block_delta", {"index": index, "delta": {"type": "thinking_delta",
                                                                               "thinking": piece}})
                       for piece in self._halves(reply.reasoning)]
            frames.append(event("content_block_delta", {"index": index, "delta": {"type": "signature_delta",
                                                                                  "signature": f"sig-{n}"}}))
            frames.append(event("content_block_stop", {"index": index}))
            index += 1
        if reply.text:
            frames.append(event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}}))
            frames += [event("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": piece}})
                       for piece in self._split(reply.text, reply.pieces)]
            frames.append(event("content_block_stop", {"index": index}))
            index += 1
        for i, (name, args) in enumerate(reply.tool_calls):
            frames.append(event("content_block_start", {"index": index, "content_block": {
                "type": "tool_use", "id": f"toolu_{self._epoch}_{n}_{i}", "name": name, "input": {}}}))
            frames += [event("content_block_delta", {"index": index, "delta": {"type": "input_json_delta",
                                                                               "partial_json": piece}})
                       for piece in self._halves(self._args(args)[0])]
            frames.append(event("content_block_stop", {"index": index}))
            index += 1
        stop = reply.finish or ("tool_use" if reply.tool_calls else "end_turn")
        frames.append(event("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": reply.stop_sequence},
                                              "usage": {"output_tokens": completion}}))
        frames.append(event("message_stop", {}))
        return frames

    def _gemini_frames(self, reply: Reply, model: str, n: int) -> list[bytes]:
        def chunk(parts: list[dict[str, Any]], final: bool = False) -> bytes:
            payload: dict[str, Any] = {"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
                                       "modelVersion": model, "responseId": f"resp-{self._epoch}-{n}"}
            if final:
                prompt, completion = reply.usage
                payload["candidates"][0]["finishReason"] = reply.finish or "STOP"
                payload["candidates"][0].update(self._grounding(reply))
                payload["usageMetadata"] = {"promptTokenCount": prompt, "candidatesTokenCount": completion,
                                            "totalTokenCount": prompt + completion}
            return b"data: " + orjson.dumps(payload) + b"\r\n\r\n"

        frames = [chunk([{"text": piece, "thought": True}]) for piece in self._halves(reply.reasoning)]
        frames += [chunk([part]) for part in self._gemini_search_parts(reply, n)]
        frames += [chunk([{"text": piece}]) for piece in self._split(reply.text, reply.pieces)]
        for i, (name, args) in enumerate(reply.tool_calls):
            part: dict[str, Any] = {"functionCall": {"name": name, "args": self._args(args)[1]}}
            if i == 0:
                part["thoughtSignature"] = f"gsig-{n}"
            frames.append(chunk([part]))
        frames.append(chunk([{"text": ""}], final=True))
        return frames


def _ends_with_prefill(body: dict[str, Any]) -> bool:
    """The request's last turn is the assistant's (OpenAI, Anthropic) or the model's (Gemini): a prefill."""
    turns = body.get("messages") or body.get("contents") or []
    return bool(turns) and isinstance(turns[-1], dict) and turns[-1].get("role") in ("assistant", "model")
