"""The two renderers of the one loop: a ``chat.completion`` object, or a ``chat.completion.chunk`` stream.

Both consume the same events, so the text a client receives is identical in both modes.

``model`` names the model that answered, as OpenAI's does (clients and billing read it): the
upstream model of the final call (the one that produced the turn, when paused), as the upstream
reported it, else the target's configured model. A stream names on every chunk the model that
produced it: from the commit point on, the target that committed; the closing chunks name the
final call's model, as the non-stream response does. The route the client asked for is
``gateway.route``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from gateway.cancellation import EXITS
from gateway.canonical import Answering, ReasoningDelta, TextDelta, custom_input
from gateway.errors import GatewayError
from gateway.loop.events import Finished, LoopEvent, LoopResult, Notice, ToolFinished, ToolProgress, ToolStarted
from gateway.random_ids import random_hex

log = logging.getLogger("loopgate.render")


def chat_call(call: dict[str, Any]) -> dict[str, Any]:
    """A paused call as Chat Completions says it: a custom (freeform) tool's as ``{type: "custom", custom: {name,
    input}}`` (canonical/tools.py), any other as it is."""
    if call.get("type") != "custom":
        return call
    function = call["function"]
    return {"id": call["id"], "type": "custom",
            "custom": {"name": function["name"], "input": custom_input(function.get("arguments"))}}


def completion_id() -> str:
    """128 random bits: ids cannot be enumerated (batched CSPRNG, no system call per request)."""
    return "chatcmpl-" + random_hex(16)


class ChatCollector:
    """The ``chat.completion`` object of a loop's events, fed one at a time.

    The non-stream answer is one; a resume's stored result is another, fed the same events beside
    the renderer (stream or not) with the same id and ``created``: the same body either way.
    """

    __slots__ = ("_reasoning", "_result", "_text", "created", "response_id", "route")

    def __init__(self, response_id: str, route: str, created: int | None = None) -> None:
        self.response_id = response_id
        self.route = route
        self.created = int(time.time()) if created is None else created
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._result: LoopResult | None = None

    def feed(self, event: LoopEvent) -> None:
        for item in event if isinstance(event, list) else (event,):
            if isinstance(item, TextDelta):
                self._text.append(item.text)
            elif isinstance(item, ReasoningDelta):
                self._reasoning.append(item.text)
            elif isinstance(item, Finished):
                self._result = item.result

    def payload(self) -> dict[str, Any]:
        result = self._result
        assert result is not None, "the loop ended without a result"
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) or None}
        if result.tool_calls:
            message["tool_calls"] = [chat_call(call) for call in result.tool_calls]
        elif message["content"] is None:
            message["content"] = ""
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        return {
            "id": self.response_id,
            "object": "chat.completion",
            "created": self.created,
            "model": result.model or self.route,
            "choices": [{"index": 0, "message": message, "finish_reason": result.finish_reason, "logprobs": None}],
            "usage": result.usage.to_openai(),
            "gateway": {"route": self.route, **result.gateway},
        }

    def result(self) -> tuple[str, str, bytes]:
        """A resume's stored result (``ResultRecorder``)."""
        return self.response_id, "chat.completion", orjson.dumps(self.payload())


async def collect(events: AsyncIterator[LoopEvent], response_id: str, route: str,
                  created: int | None = None) -> dict[str, Any]:
    collector = ChatCollector(response_id, route, created)
    async for event in events:
        collector.feed(event)
    return collector.payload()


class ChunkEncoder:
    """Builds SSE frames; the constant part of every chunk is serialised once per answering model."""

    __slots__ = ("_content", "_created", "_head", "_id", "_model", "_tail", "route")

    def __init__(self, response_id: str, model: str, route: str = "", created: int | None = None) -> None:
        self._id = response_id
        self._created = int(time.time()) if created is None else created
        self._tail = b"}\n\n"
        self.route = route
        self._use(model)

    def set_model(self, model: str) -> None:
        """The model the following chunks name (another target may answer the next call of a loop)."""
        if model != self._model:
            self._use(model)

    def _use(self, model: str) -> None:
        self._model = model
        head = orjson.dumps({"id": self._id, "object": "chat.completion.chunk", "created": self._created,
                             "model": model})
        self._head = b"data: " + head[:-1] + b',"choices":'
        self._content = self._head + b'[{"index":0,"delta":{"content":'

    def text(self, text: str) -> bytes:
        """The most frequent frame, assembled from constant parts around the encoded text."""
        return self._content + orjson.dumps(text) + b'},"finish_reason":null}]}\n\n'

    def delta(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        return self._head + orjson.dumps([choice]) + self._tail

    def extra(self, **fields: Any) -> bytes:
        """A chunk with ``choices: []``: usage, or the gateway's progress and summary objects."""
        return self._head + b"[]," + orjson.dumps(fields)[1:-1] + self._tail


DONE = b"data: [DONE]\n\n"


def error_frame(error: GatewayError) -> bytes:
    return b"data: " + error.body() + b"\n\n"


async def stream_frames(first: list[LoopEvent], events: AsyncIterator[LoopEvent], encoder: ChunkEncoder,
                        include_usage: bool, on_error: Any, on_close: Any) -> AsyncIterator[bytes]:
    """Encode events as they come. ``first`` was already pulled (so failures before it got a real status).

    Each event becomes one write (a batch of deltas from one upstream read included). A failure
    after bytes went out cannot change the status any more: it ends the stream with an
    OpenAI-shaped error frame and ``[DONE]``; nothing is replayed. ``on_close`` runs however the
    stream ends, client disconnect included.
    """
    try:
        head = encoder.delta({"role": "assistant", "content": ""})
        yield head + b"".join(_encode(event, encoder, include_usage) for event in first)
        try:
            async for event in events:
                yield _encode(event, encoder, include_usage)
        except BaseException as exc:  # every failure (a native panic too) becomes an in-stream error
            if isinstance(exc, EXITS):  # a close or a cancellation is no failure
                raise
            yield error_frame(on_error(exc))
        yield DONE
    finally:
        await on_close()


def _encode(event: LoopEvent, encoder: ChunkEncoder, include_usage: bool) -> bytes:
    if isinstance(event, list):
        return b"".join(frame for item in event for frame in _frames(item, encoder, include_usage))
    return b"".join(_frames(event, encoder, include_usage))


def _frames(event: LoopEvent, encoder: ChunkEncoder, include_usage: bool) -> list[bytes]:
    if isinstance(event, TextDelta):
        return [encoder.text(event.text)]
    if isinstance(event, ReasoningDelta):
        return [encoder.delta({"reasoning_content": event.text})]
    if isinstance(event, ToolStarted):
        return [encoder.extra(gateway={"event": "tool_started", "tool_call_id": event.tool_call_id,
                                       "name": event.name})]
    if isinstance(event, ToolProgress):
        return [encoder.extra(gateway={"event": "tool_progress", "tool_call_id": event.tool_call_id,
                                       "name": event.name, **event.detail()})]
    if isinstance(event, ToolFinished):
        return [encoder.extra(gateway={"event": "tool_finished", "tool_call_id": event.tool_call_id,
                                       "name": event.name, "status": event.status,
                                       "elapsed_ms": round(event.elapsed_ms, 2)})]
    if isinstance(event, Notice):
        return [encoder.extra(gateway={"event": event.event, **event.detail})]
    if isinstance(event, Answering):
        encoder.set_model(event.model)
        return []
    if isinstance(event, Finished):
        result = event.result
        if result.model:
            encoder.set_model(result.model)
        frames = []
        for index, call in enumerate(result.tool_calls):
            kind = "custom" if call.get("type") == "custom" else "function"
            frames.append(encoder.delta({"tool_calls": [{"index": index, "id": call["id"], "type": kind,
                                                         kind: chat_call(call)[kind]}]}))
        frames.append(encoder.delta({}, result.finish_reason))
        frames.append(encoder.extra(gateway={"route": encoder.route, **result.gateway}))
        if include_usage:
            frames.append(encoder.extra(usage=result.usage.to_openai()))
        return frames
    return []
