"""A fast fake OpenAI-compatible upstream for benchmarks (raw asyncio protocol + httptools + uvloop).

Serves, on 127.0.0.1 only:
  POST /chat/completions (and /v1/chat/completions): JSON, or an SSE stream when ``"stream": true``
       (one role chunk, N content chunks, a finish chunk, a usage chunk, ``data: [DONE]``).
  POST /responses (and /v1/responses): the same answers in the OpenAI Responses API's format
       (bench/fake_responses.py), for a provider of ``type: openai_responses``.
  GET  /models (and /v1/models), GET /healthz.
  POST /tool: a tiny HTTP tool endpoint (the body is the tool's arguments; answers a short JSON result).
  POST /embeddings (and /v1/embeddings): one vector of ``dimensions`` (default 1536, text-embedding-3-small's)
       per input, as floats or base64 per ``encoding_format``; answers are built once per shape and reused.

Options: --port, --latency-ms (before each chat completion), --chunk-delay-ms (between stream chunks),
--chunks N, --agent-tools N (when the request carries ``tools`` and the conversation holds fewer than
N ``tool`` messages, answer with one ``bench_tool`` call ``{"step": k}``; otherwise answer with text),
--fail-status N (answer every chat completion at once with HTTP N and an OpenAI error body; the failing
target of the failover benchmark. /healthz still answers 200), --unique-call-ids (each tool call gets an id
of its own, ``call_`` and 24 characters as OpenAI's, instead of ``call_bench_<step>``: pauses resumed way A
by concurrent clients must not share ids).

It does as little work as possible per request so that it is never the bottleneck of a benchmark:
one process, one core, >15k requests/s for non-stream completions on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import itertools
import struct
import time
from dataclasses import dataclass
from typing import Any

import httptools
import orjson

from bench import fake_responses

try:  # uvloop comes with uvicorn[standard]
    import uvloop
except ImportError:  # pragma: no cover - falls back to the default loop
    uvloop = None  # type: ignore[assignment]

TEXT = "Hello from the fake upstream."
_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    404: b"Not Found",
    429: b"Too Many Requests",
    500: b"Internal Server Error",
    502: b"Bad Gateway",
    503: b"Service Unavailable",
}


@dataclass(frozen=True, slots=True)
class Options:
    latency_s: float = 0.0
    chunk_delay_s: float = 0.0
    chunks: int = 8
    agent_tools: int = 0
    fail_status: int = 0
    unique_call_ids: bool = False


_CALL_NUMBERS = itertools.count(1)


def _response(status: int, body: bytes, content_type: bytes = b"application/json", keep_alive: bool = True) -> bytes:
    head = b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n" % (
        status,
        _REASONS.get(status, b"Error"),
        content_type,
        len(body),
        b"" if keep_alive else b"Connection: close\r\n",
    )
    return head + body


_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n"
)
_MODELS = orjson.dumps(
    {"object": "list", "data": [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "bench"}]}
)

_FAIL_BODY = orjson.dumps(
    {"error": {"message": "the fake upstream is failing on purpose", "type": "server_error", "code": None}}
)


def _sse(obj: dict[str, Any] | None) -> bytes:
    data = b"data: [DONE]\n\n" if obj is None else b"data: " + orjson.dumps(obj) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


EMBEDDING_DIMENSIONS = 1536
_EMBEDDINGS: dict[tuple[int, int, bool], bytes] = {}


def embeddings_body(req: dict[str, Any]) -> bytes:
    """An OpenAI embeddings answer for ``req`` (same vector for every input: the gateway's work is measured)."""
    inputs = req.get("input")
    count = len(inputs) if isinstance(inputs, list) and inputs and not isinstance(inputs[0], int) else 1
    dimensions = req.get("dimensions") or EMBEDDING_DIMENSIONS
    as_base64 = req.get("encoding_format") == "base64"
    key = (count, dimensions, as_base64)
    body = _EMBEDDINGS.get(key)
    if body is None:
        vector = [((i * 7919) % 1000) / 1000 - 0.5 for i in range(dimensions)]
        embedding: Any = (base64.b64encode(struct.pack(f"<{dimensions}f", *vector)).decode() if as_base64
                          else vector)
        body = _EMBEDDINGS[key] = orjson.dumps({
            "object": "list", "model": req.get("model"),
            "data": [{"object": "embedding", "index": i, "embedding": embedding} for i in range(count)],
            "usage": {"prompt_tokens": 8 * count, "total_tokens": 8 * count}})
    return body


def plan_reply(req: dict[str, Any], opts: Options) -> tuple[str | None, list[dict[str, Any]] | None]:
    """(text, tool_calls) the fake model answers with for this request."""
    if opts.agent_tools > 0 and req.get("tools"):
        messages = req.get("messages") or []
        done = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "tool")
        if done < opts.agent_tools:
            step = done + 1
            call_id = f"call_{next(_CALL_NUMBERS):024d}" if opts.unique_call_ids else f"call_bench_{step}"
            call = {
                "id": call_id,
                "type": "function",
                "function": {"name": "bench_tool", "arguments": orjson.dumps({"step": step}).decode()},
            }
            return None, [call]
        return f"Done after {done} tool results.", None
    return TEXT, None


def completion_body(req: dict[str, Any], opts: Options, prompt_tokens: int) -> bytes:
    text, calls = plan_reply(req, opts)
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    return orjson.dumps(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": req.get("model", "fake-model"),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": _usage(prompt_tokens, opts.chunks),
        }
    )


def stream_events(req: dict[str, Any], opts: Options, prompt_tokens: int) -> list[bytes]:
    """The HTTP chunks of one SSE response (without the response head and the final 0-chunk)."""
    text, calls = plan_reply(req, opts)
    model = req.get("model", "fake-model")
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    events = [chunk({"role": "assistant", "content": ""})]
    if calls:
        for i, call in enumerate(calls):
            events.append(chunk({"tool_calls": [{"index": i, **call}]}))
        events.append(chunk({}, "tool_calls"))
    else:
        n = max(1, opts.chunks)
        events.extend(chunk({"content": f"tok{i} " if i < n - 1 else str(text)}) for i in range(n))
        events.append(chunk({}, "stop"))
    usage = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
        "usage": _usage(prompt_tokens, opts.chunks),
    }
    events.append(_sse(usage))
    events.append(_sse(None))
    return events


class FakeProtocol(asyncio.Protocol):
    """One HTTP/1.1 keep-alive connection. Responses are written in request order."""

    __slots__ = ("_body", "_opts", "_parser", "_tail", "_transport", "_url")

    def __init__(self, opts: Options) -> None:
        self._opts = opts
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._body: list[bytes] = []
        self._tail: asyncio.Task[None] | None = None  # last slow response still being written

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            if self._transport is not None:
                self._transport.write(_response(400, b"{}", keep_alive=False))
                self._transport.close()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url = b""
        self._body = []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        method = self._parser.get_method()
        path = self._url.split(b"?", 1)[0]
        keep_alive = self._parser.should_keep_alive()
        body = b"".join(self._body)
        opts = self._opts
        if method == b"POST" and path.endswith(b"/chat/completions") and opts.fail_status:
            out = _response(opts.fail_status, _FAIL_BODY, keep_alive=keep_alive)
        elif method == b"POST" and path.endswith(b"/chat/completions"):
            try:
                req = orjson.loads(body)
            except orjson.JSONDecodeError:
                self._send(_response(400, b'{"error":{"message":"bad json"}}', keep_alive=keep_alive), keep_alive)
                return
            prompt_tokens = len(body) // 4
            if req.get("stream"):
                self._later(self._stream(stream_events(req, opts, prompt_tokens), keep_alive))
                return
            out = _response(200, completion_body(req, opts, prompt_tokens), keep_alive=keep_alive)
            if opts.latency_s > 0 or self._tail is not None:
                self._later(self._delayed(out, keep_alive, opts.latency_s))
                return
        elif method == b"POST" and path.endswith(b"/responses"):
            req = orjson.loads(body)
            prompt_tokens = len(body) // 4
            if req.get("stream"):
                self._later(self._stream(fake_responses.stream_events(req, opts.agent_tools, prompt_tokens,
                                                                      opts.chunks), keep_alive))
                return
            out = _response(200, fake_responses.response_body(req, opts.agent_tools, prompt_tokens, opts.chunks),
                            keep_alive=keep_alive)
        elif method == b"POST" and path.endswith(b"/embeddings"):
            out = _response(200, embeddings_body(orjson.loads(body)), keep_alive=keep_alive)
        elif method == b"GET" and path in (b"/models", b"/v1/models"):
            out = _response(200, _MODELS, keep_alive=keep_alive)
        elif method == b"GET" and path == b"/healthz":
            out = _response(200, b'{"status":"ok"}', keep_alive=keep_alive)
        elif method == b"POST" and path == b"/tool":
            out = _response(200, b'{"ok":true,"args":' + (body or b"{}") + b"}", keep_alive=keep_alive)
        else:
            out = _response(404, b'{"error":{"message":"not found"}}', keep_alive=keep_alive)
        if self._tail is not None:  # keep responses in request order behind a slow one
            self._later(self._delayed(out, keep_alive, 0.0))
        else:
            self._send(out, keep_alive)

    # writing
    def _send(self, data: bytes, keep_alive: bool) -> None:
        if self._transport is None:
            return
        self._transport.write(data)
        if not keep_alive:
            self._transport.close()

    def _later(self, coro: Any) -> None:
        prev = self._tail
        task = asyncio.get_running_loop().create_task(self._after(prev, coro))
        self._tail = task
        task.add_done_callback(self._clear_tail)

    def _clear_tail(self, task: asyncio.Task[None]) -> None:
        if self._tail is task:
            self._tail = None

    @staticmethod
    async def _after(prev: asyncio.Task[None] | None, coro: Any) -> None:
        if prev is not None:
            await asyncio.shield(prev)
        await coro

    async def _delayed(self, data: bytes, keep_alive: bool, delay_s: float) -> None:
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        self._send(data, keep_alive)

    async def _stream(self, events: list[bytes], keep_alive: bool) -> None:
        opts = self._opts
        if opts.latency_s > 0:
            await asyncio.sleep(opts.latency_s)
        if self._transport is None:
            return
        if opts.chunk_delay_s <= 0:
            self._send(_STREAM_HEAD + b"\r\n" + b"".join(events) + b"0\r\n\r\n", keep_alive)
            return
        self._transport.write(_STREAM_HEAD + b"\r\n" + events[0])
        for event in events[1:]:
            await asyncio.sleep(opts.chunk_delay_s)
            if self._transport is None:
                return
            self._transport.write(event)
        self._send(b"0\r\n\r\n", keep_alive)


async def serve(host: str, port: int, opts: Options) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: FakeProtocol(opts), host, port, backlog=2048, reuse_address=True)
    print(f"fake upstream listening on http://{host}:{port} {opts}", flush=True)
    async with server:
        await server.serve_forever()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9100)
    p.add_argument("--latency-ms", type=float, default=0.0, help="delay before each chat completion")
    p.add_argument("--chunk-delay-ms", type=float, default=0.0, help="delay between stream chunks")
    p.add_argument("--chunks", type=int, default=8, help="content chunks per stream")
    p.add_argument("--agent-tools", type=int, default=0, help="ask for bench_tool until N tool results exist")
    p.add_argument("--fail-status", type=int, default=0, help="answer every chat completion with this HTTP status")
    p.add_argument("--unique-call-ids", action="store_true", help="a tool-call id of its own for every call")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("the fake upstream only listens on loopback")
    opts = Options(args.latency_ms / 1000, args.chunk_delay_ms / 1000, args.chunks, args.agent_tools, args.fail_status,
                   args.unique_call_ids)
    run = uvloop.run if uvloop is not None else asyncio.run
    with contextlib.suppress(KeyboardInterrupt):
        run(serve(args.host, args.port, opts))


if __name__ == "__main__":
    main()
