"""``type: mock``: a deterministic model that runs in the gateway process, for keyless first runs and tests.

No network, no sockets, no key. The answer depends only on the request, so the same
conversation always gets the same reply, calls, arguments and usage; only each tool call's id is
unique (``call_<digest of the request>_<random>``), as a real model's are: two identical requests
paused at once must not share an id. The rules (README, "Providers"):

1. **After tool results** (the last message is a ``tool`` message): it answers from them, one
   line per trailing result, ``The <tool> tool returned: <content>`` (content cut to 500
   characters; ``<tool>`` is the name from the assistant call with that id).
2. **Tool calls**: when tools are offered and ``tool_choice`` is not ``"none"``, it calls
   - the tool a named ``tool_choice`` names; else
   - every offered tool whose name appears as a word in the last user message
     (``What is the weather? use get_weather``); else
   - every offered tool when that message says ``use tools`` or ``use the tools``; else
   - the first tool when ``tool_choice`` is ``"required"``.
   At most 16 calls, one with ``parallel_tool_calls: false``. Arguments come from each tool's
   JSON Schema (``mock_arguments.py``). A client tool is called like any other, so the gateway
   pauses on it as it would for a real model.
3. **Otherwise** it echoes: ``You said: <last user message>`` (cut to 1000 characters), or
   ``Hello from the mock provider.`` when there is no user text.

``max_tokens``/``max_completion_tokens`` cut the text to that many pieces (``finish_reason:
"length"``). A piece is a word with its leading whitespace (long words split every 12
characters); a stream sends one piece per delta, ``tokens_per_s`` of them per second
(0: all at once; an answer that is not streamed comes whole). ``latency_ms`` passes before
anything is answered; more latency than the provider's ``timeout_s`` or the request's
remaining time is a ``timeout`` error, so failover can be tried against it. Usage:
``prompt_tokens`` is a token per 4 bytes of the JSON of the messages and tools,
``completion_tokens`` the pieces of text plus a token per 4 bytes of each call's name and
arguments.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections.abc import AsyncGenerator
from typing import Any

import orjson

from gateway.canonical import (
    Answering,
    Message,
    ModelRequest,
    ModelResponse,
    StreamDelta,
    TextDelta,
    ToolCall,
    ToolDef,
    Usage,
    stable_tool_call_id,
    text_of,
)
from gateway.config.providers_section import ProviderConfig
from gateway.providers.base import ErrorClass, ProviderError
from gateway.providers.mock_arguments import sample_arguments
from gateway.random_ids import random_hex

MAX_CALLS = 16
#: the random part of each tool call's id (after the content digest): ids are unique per call, so two
#: identical paused requests never share one (a way-A follow-up names its own continuation)
CALL_ID_RANDOM_BYTES = 8
MAX_ECHO_CHARS = 1000
MAX_RESULT_CHARS = 500
GREETING = "Hello from the mock provider."

_PIECE = re.compile(r"\s*\S{1,12}|\s+")
_WORD = re.compile(r"[A-Za-z0-9_-]+")
_USE_TOOLS = ("use tools", "use the tools")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _last_user_text(messages: list[Message]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return text_of(message.get("content"))
    return ""


def _offered(tools: list[ToolDef]) -> list[ToolDef]:
    return [tool for tool in tools
            if isinstance(tool.get("function"), dict) and isinstance(tool["function"].get("name"), str)
            and tool["function"]["name"]]


def _choice_name(choice: Any) -> str | None:
    if isinstance(choice, dict):
        function = choice.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return function["name"]
    return None


def tools_to_call(request: ModelRequest) -> list[ToolDef]:
    """Which offered tools the mock calls this turn (module docstring, rule 2)."""
    tools = _offered(request.tools)
    choice = request.tool_choice
    if not tools or choice == "none" or not request.messages or request.messages[-1].get("role") == "tool":
        return []
    named = _choice_name(choice)
    if named is not None:
        return [tool for tool in tools if tool["function"]["name"] == named][:1]
    text = _last_user_text(request.messages).lower()
    words = set(_WORD.findall(text))
    chosen = [tool for tool in tools if tool["function"]["name"].lower() in words]
    if not chosen and any(phrase in text for phrase in _USE_TOOLS):
        chosen = tools
    if not chosen and choice == "required":
        chosen = tools[:1]
    if request.params.get("parallel_tool_calls") is False:
        return chosen[:1]
    return chosen[:MAX_CALLS]


def answer_text(messages: list[Message]) -> str:
    """The text answer (module docstring, rules 1 and 3)."""
    if messages and messages[-1].get("role") == "tool":
        start = len(messages)
        while start > 0 and messages[start - 1].get("role") == "tool":
            start -= 1
        names: dict[str, str] = {}
        if start > 0:
            for call in messages[start - 1].get("tool_calls") or ():
                if isinstance(call, dict) and isinstance(call.get("function"), dict):
                    names[str(call.get("id"))] = str(call["function"].get("name") or "")
        lines = []
        for message in messages[start:]:
            name = names.get(str(message.get("tool_call_id")), "") or "unknown"
            lines.append(f"The {name} tool returned: {_cut(text_of(message.get('content')), MAX_RESULT_CHARS)}")
        return "\n".join(lines)
    text = _last_user_text(messages).strip()
    return f"You said: {_cut(text, MAX_ECHO_CHARS)}" if text else GREETING


def pieces(text: str) -> list[str]:
    """The text in stream-sized pieces ("tokens"); joined they are the text."""
    return _PIECE.findall(text)


def _limit(params: dict[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = params.get(key)
        if type(value) is int and value > 0:
            return value
    return None


def respond(request: ModelRequest, model: str) -> tuple[ModelResponse, list[str]]:
    """The whole turn and its text pieces: a function of the request, but for each tool call's random id part."""
    prompt = orjson.dumps(request.messages) + (orjson.dumps(request.tools) if request.tools else b"")
    digest = hashlib.blake2b(prompt + model.encode(), digest_size=9).hexdigest()
    chosen = tools_to_call(request)
    parts: list[str] = []
    calls: list[ToolCall] = []
    completion = 0
    finish: Any = "stop"
    if chosen:
        for index, tool in enumerate(chosen):
            function = tool["function"]
            arguments = orjson.dumps(sample_arguments(function.get("parameters"))).decode()
            calls.append({"id": f"{stable_tool_call_id(digest, index)}_{random_hex(CALL_ID_RANDOM_BYTES)}",
                          "type": "function",
                          "function": {"name": function["name"], "arguments": arguments}})
            completion += (len(function["name"]) + len(arguments) + 3) // 4
        finish = "tool_calls"
    else:
        parts = pieces(answer_text(request.messages))
        limit = _limit(request.params)
        if limit is not None and len(parts) > limit:
            parts = parts[:limit]
            finish = "length"
        completion = len(parts)
    message: Message = {"role": "assistant", "content": "".join(parts) or None}
    if calls:
        message["tool_calls"] = calls
    usage = Usage(prompt_tokens=(len(prompt) + 3) // 4, completion_tokens=completion)
    return ModelResponse(message=message, finish_reason=finish, usage=usage, model=model,
                         id=f"chatcmpl-mock-{digest}"), parts


async def _wait(seconds: float, budget: float, what: str) -> None:
    """Sleep ``seconds``; when that is more than ``budget``, sleep the budget and time out as a stalled upstream."""
    if seconds <= 0:
        return
    if seconds > budget:
        await asyncio.sleep(max(0.0, budget))
        raise ProviderError(ErrorClass.TIMEOUT, f"mock provider: {what} is longer than the time allowed")
    await asyncio.sleep(seconds)


class MockAdapter:
    """Answers in process: the router calls ``complete``/``stream`` instead of the HTTP transport."""

    wire_format = "mock"
    in_process = True

    async def complete(self, request: ModelRequest, provider: ProviderConfig, model: str,
                       timeout: float) -> ModelResponse:
        response, _ = respond(request, model)
        await _wait(provider.latency_ms / 1000, min(timeout, provider.timeouts.read), "latency_ms")
        return response

    async def stream(self, request: ModelRequest, provider: ProviderConfig, model: str, timeout: float,
                     label: str = "") -> AsyncGenerator[list[StreamDelta] | ModelResponse, None]:
        response, parts = respond(request, model)
        read_timeout = provider.timeouts.read
        await _wait(provider.latency_ms / 1000, min(timeout, read_timeout), "latency_ms")
        if parts:
            rate = provider.tokens_per_s
            if rate <= 0:
                yield [Answering(model), *(TextDelta(part) for part in parts)]
            else:
                gap = 1 / rate
                started = time.monotonic()
                for index, part in enumerate(parts):
                    if index:
                        # Paced from the start, so sleeping late does not add up over a long answer.
                        await _wait(max(0.0, started + index * gap - time.monotonic()), read_timeout,
                                    "the gap tokens_per_s leaves between pieces")
                        yield [TextDelta(part)]
                    else:
                        yield [Answering(model), TextDelta(part)]
        yield response
