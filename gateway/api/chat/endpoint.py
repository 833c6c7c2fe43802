"""``POST /v1/chat/completions``: a parser and a renderer on the one loop driver (``api/driver.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from typing import Any

from gateway.api.chat.request import ChatRequest, parse_chat_request
from gateway.api.chat.respond import respond
from gateway.api.driver import Answer
from gateway.api.loop.surface import LoopSurface
from gateway.api.request.lifecycle import Work
from gateway.http.incoming import Incoming
from gateway.loop.events import LoopEvent
from gateway.loop.results import ResultSlot

PATH = "/v1/chat/completions"


class ChatSurface(LoopSurface[ChatRequest]):
    """OpenAI's chat completions: the request in canonical form already, OpenAI's error shape."""

    def parse(self, body: Any, incoming: Incoming) -> ChatRequest:
        return parse_chat_request(body)

    def render(self, events: AsyncIterator[LoopEvent], call: ChatRequest, work: Work,
               slot: ResultSlot | None) -> Awaitable[Answer]:
        return respond(events, call.stream, call.include_usage, call.model, work, slot)


CHAT = ChatSurface(PATH)
