"""``POST /v1/messages``: the Anthropic Messages API on the same lifecycle and loop as chat completions.

Parse (``request``), plan (the route, the caller's tools against the route's server tools), run
the loop or resume a paused one, render (``respond``). The caller's tools are the caller's: a
call to one ends the message with ``stop_reason: "tool_use"``, and the next request, carrying
the ``tool_result`` blocks, resumes the paused loop from its stored transcript (way A, as on
chat completions: matched by tool ids and the paused turn). Claude Code puts text (reminders)
beside its tool results; that text goes after the completed turn. ``?beta=true`` (what Claude
Code sends) changes nothing: betas are read from ``anthropic-beta``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from typing import Any

from gateway.api.driver import Answer
from gateway.api.loop.surface import LoopSurface
from gateway.api.messages.count import COUNT_TOKENS
from gateway.api.messages.errors import anthropic_error
from gateway.api.messages.headers import betas_of, use_api_key
from gateway.api.messages.request import MessagesRequest, parse_messages_request
from gateway.api.messages.respond import respond_message
from gateway.api.request.lifecycle import Work
from gateway.canonical import Message, ToolDef
from gateway.http.incoming import Incoming
from gateway.loop.events import LoopEvent
from gateway.loop.pairing import ToolResult
from gateway.loop.results import ResultSlot

PATH = "/v1/messages"


def _split_follow_up(messages: list[Message]) -> tuple[list[Message], list[Message]]:
    """(the conversation up to its trailing tool results, the user text sent beside them)."""
    if len(messages) >= 2 and messages[-1].get("role") == "user" and messages[-2].get("role") == "tool":
        return messages[:-1], messages[-1:]
    return messages, []


def _with_client_messages(results: dict[str, ToolResult], messages: list[Message]) -> dict[str, ToolResult]:
    """Way A's results keep the caller's own tool messages (``is_error``, images, the verbatim block)."""
    sent = {m["tool_call_id"]: m for m in messages if m.get("role") == "tool"}
    for call_id, result in results.items():
        message = sent.get(call_id)
        if message is not None and result.status == "client":
            result.message = message
    return results


class MessagesSurface(LoopSurface[MessagesRequest]):
    """Anthropic's Messages: ``x-api-key``, typed tools, text beside way A's results, Anthropic's error shape."""

    tool_kind = "tool"

    def parse(self, body: Any, incoming: Incoming) -> MessagesRequest:
        return parse_messages_request(body, betas_of(incoming))

    def caller_tools(self, call: MessagesRequest) -> list[ToolDef]:
        """Every tool the caller declared (custom and typed): a server tool's name on one is a 400."""
        return [{"type": "function", "function": {"name": name}} for name in call.tool_names]

    def own_results(self, results: dict[str, ToolResult], head: list[Message]) -> dict[str, ToolResult]:
        return _with_client_messages(results, head)

    def render(self, events: AsyncIterator[LoopEvent], call: MessagesRequest, work: Work,
               slot: ResultSlot | None) -> Awaitable[Answer]:
        return respond_message(events, call.stream, call.model, call.show_server_tools, work, slot)


MESSAGES = MessagesSurface(PATH, anthropic_error, identify=use_api_key, follow_up=_split_follow_up,
                           operations=(COUNT_TOKENS,))
