"""A fake provider whose streamed answer never ends: text as fast as the socket takes it.

It speaks the OpenAI, Anthropic or Gemini stream format, sends ``limit`` bytes of events (None: until the
gateway hangs up) and never a finish event, so a gateway that keeps what it forwards grows with it. The
events are built once and written in large batches, so a 320 MiB stream takes seconds, not minutes.
"""

from __future__ import annotations

import asyncio

import orjson
from aiohttp import web

from tests.fakes.threaded import ThreadedApp

#: one event's text: a sentence repeated, a few KiB (a provider's text events are smaller; the count of
#: events per megabyte only changes the gateway's CPU time, not what it keeps)
PIECE = "The quick brown fox jumps over the lazy dog. " * 64
BATCH_EVENTS = 64  # events written per ``write``: about 200 KiB


class EndlessUpstream(ThreadedApp):
    def __init__(self, wire: str = "openai", limit: int | None = None) -> None:
        super().__init__()
        self.wire = wire
        self.limit = limit  # bytes of events per stream; None: until the client goes away
        self.sent = 0  # bytes written by the last stream
        self.streams = 0  # streams started
        self.hung_up = 0  # streams the client ended before ``limit``

    def build(self) -> web.Application:
        app = web.Application(client_max_size=512 * 1024 * 1024)
        app.router.add_route("POST", "/{tail:.*}", self._handle)
        return app

    def _head(self) -> bytes:
        if self.wire == "anthropic":
            start = {"type": "message_start", "message": {
                "id": "msg_endless", "type": "message", "role": "assistant", "model": "endless", "content": [],
                "stop_reason": None, "usage": {"input_tokens": 10, "output_tokens": 1}}}
            block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
            return (b"event: message_start\ndata: " + orjson.dumps(start) + b"\n\n"
                    + b"event: content_block_start\ndata: " + orjson.dumps(block) + b"\n\n")
        return b""

    def _event(self) -> bytes:
        if self.wire == "anthropic":
            delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": PIECE}}
            return b"event: content_block_delta\ndata: " + orjson.dumps(delta) + b"\n\n"
        if self.wire == "gemini":
            chunk = {"candidates": [{"content": {"role": "model", "parts": [{"text": PIECE}]}, "index": 0}],
                     "modelVersion": "endless", "responseId": "resp-endless"}
            return b"data: " + orjson.dumps(chunk) + b"\r\n\r\n"
        chunk = {"id": "chatcmpl-endless", "object": "chat.completion.chunk", "created": 0, "model": "endless",
                 "choices": [{"index": 0, "delta": {"content": PIECE}, "finish_reason": None}]}
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.streams += 1
        self.sent = 0
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        batch = self._event() * BATCH_EVENTS
        try:
            head = self._head()
            if head:
                await response.write(head)
            while self.limit is None or self.sent < self.limit:
                await response.write(batch)
                self.sent += len(batch)
        except (ConnectionResetError, asyncio.CancelledError):
            self.hung_up += 1
            raise
        # ``limit`` reached: the connection closes without a finish event, as a stream cut short would.
        request.transport.close()  # type: ignore[union-attr]
        return response
