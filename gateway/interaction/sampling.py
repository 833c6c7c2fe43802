"""An MCP server's ``sampling/createMessage``, answered on its ``sampling_route`` for the key whose call it is.

A server that asks the client's model to generate does so during a tool call of some key's loop:
the generation is that key's work. It goes through the request lifecycle like any request of the
key (``Lifecycle.begin`` + ``Work.act_for``: its route allow-list, budget, rate limits, usage rows,
cost, access record and span, under the path ``/mcp/sampling``), as one model call on the route's
targets with their failover, **without tools**, ``max_tokens`` capped at the server's
``sampling_max_tokens``.

Translation: MCP text content becomes canonical text, image content an ``image_url`` data part,
audio a note that it was left out; ``systemPrompt`` a system message; ``temperature`` and
``stopSequences`` the request's ``temperature`` and ``stop``. Of ``modelPreferences`` the ``hints``
are honoured: the first target whose upstream model contains a hint's name is tried first (the
route's order otherwise); the cost/speed/intelligence priorities are not (the route's order is the
operator's choice). The answer's text goes back as one text content block with the upstream model
and a stop reason (``endTurn``, ``maxTokens``, ``stopSequence``).

Each sampling is a model call billed to the asking key, so a server's appetite is bounded: at most
``max_sampling_calls_per_tool_call`` per tool call and ``max_sampling_calls_per_minute`` per server
(a sliding 60 s window, per worker process). Past either, the request is answered with an MCP error
(the tool call goes on) and counted as refused. What was sampled is reported on the asking request:
``gateway.sampling`` = ``{calls, prompt_tokens, completion_tokens, refused}`` (``LoopState.sampling``).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from gateway.canonical import CallRecord, Message, ModelRequest, Usage, WorkRecord, text_of
from gateway.config.mcp_section import McpServerConfig
from gateway.config.model import ApiKey
from gateway.errors import GatewayError
from gateway.http.incoming import Incoming
from gateway.loop.engine import LoopRequest
from gateway.routing.router import Router
from gateway.routing.routes import RoutePlan
from gateway.tools.interaction import SamplingAnswer, SamplingHandler, SamplingRefused, SamplingRequest

log = logging.getLogger("loopgate.sampling")

PATH = "/mcp/sampling"
#: messages of one sampling request taken at most (the source bounds their size)
MAX_MESSAGES = 100
_STOP = {"stop": "endTurn", "length": "maxTokens", "tool_calls": "endTurn", "content_filter": "endTurn"}
WINDOW_S = 60.0


class SamplingWork(Protocol):
    """What a sampling does with its request's work (``api/request/lifecycle.Work``): one model call for a key."""

    def act_for(self, key: ApiKey) -> None: ...

    def allow(self, plan: RoutePlan, resume: bool = False) -> None: ...

    async def admit(self, body_bytes: int, tokens: int | None = None, plan: RoutePlan | None = None,
                    params: Mapping[str, Any] = ..., budget: bool = True) -> None: ...

    def account(self, record: WorkRecord) -> int | None: ...

    async def settle(self, usage: Usage | None) -> None: ...

    async def failed(self, exc: BaseException) -> GatewayError: ...

    def done(self, status: int, error: GatewayError | None = None) -> None: ...


class Lifecycle(Protocol):
    """The request lifecycle (``api/request/lifecycle.Lifecycle``): a sampling is a request like any other."""

    def begin(self, method: str, path: str, incoming: Incoming) -> SamplingWork: ...


class SamplingWindow:
    """The samplings each server made in the last minute, in this worker; at most its cap of times kept."""

    def __init__(self) -> None:
        self._made: dict[str, deque[float]] = {}

    def take(self, server: McpServerConfig, now: float) -> bool:
        """Count one more sampling for ``server``; False (nothing counted) when its minute is full."""
        made = self._made.setdefault(server.name, deque())
        while made and made[0] <= now - WINDOW_S:
            made.popleft()
        if len(made) >= server.max_sampling_calls_per_minute:
            return False
        made.append(now)
        return True


def cap_refusal(server: McpServerConfig, made: int, window: SamplingWindow) -> str | None:
    """Why one more sampling of a tool call that ``made`` some is refused (a cap), or None (it is counted)."""
    if made >= server.max_sampling_calls_per_tool_call:
        return (f"this tool call already made {server.max_sampling_calls_per_tool_call} sampling requests "
                f"(mcp_servers.{server.name}.max_sampling_calls_per_tool_call)")
    if not window.take(server, time.monotonic()):
        return (f"MCP server {server.name} made {server.max_sampling_calls_per_minute} sampling requests in the "
                f"last minute (mcp_servers.{server.name}.max_sampling_calls_per_minute)")
    return None


async def _no_body() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


def canonical_messages(question: SamplingRequest) -> list[Message]:
    messages: list[Message] = []
    if question.system_prompt:
        messages.append({"role": "system", "content": question.system_prompt})
    for item in question.messages[:MAX_MESSAGES]:
        role = item.get("role") if item.get("role") in ("user", "assistant") else "user"
        content = item.get("content")
        blocks = content if isinstance(content, list) else [content]
        parts: list[dict[str, Any]] = []
        for block in blocks:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                parts.append({"type": "text", "text": str(block.get("text", ""))})
            elif kind == "image" and role == "user":
                mime = str(block.get("mimeType") or "image/png")
                parts.append({"type": "image_url", "image_url": {"url": f"data:{mime};base64,{block.get('data', '')}"}})
            else:
                parts.append({"type": "text", "text": f"[{kind} content left out]"})
        if role == "assistant" or all(p["type"] == "text" for p in parts):
            messages.append({"role": role, "content": "".join(p.get("text", "") for p in parts)})
        else:
            messages.append({"role": role, "content": parts})
    return messages


def preferred(plan: RoutePlan, preferences: dict[str, Any] | None) -> list[Any]:
    """The route's targets, the first one matching a hint (in the hints' order) moved to the front."""
    targets = list(plan.targets)
    hints = (preferences or {}).get("hints")
    for hint in hints if isinstance(hints, list) else ():
        name = hint.get("name") if isinstance(hint, dict) else None
        if not isinstance(name, str) or not name:
            continue
        match = next((t for t in targets if name.lower() in t.model.lower()), None)
        if match is not None:
            targets.remove(match)
            return [match, *targets]
    return targets


def sampler_factory(lifecycle: Lifecycle, find_key: Callable[[str], ApiKey | None], router: Router,
                    lookup: Callable[[str], RoutePlan | None], request_timeout_s: float
                    ) -> Callable[[LoopRequest, McpServerConfig], SamplingHandler]:
    """``asking_factory``'s sampler: the handler for one tool call of a loop to one server (made per call, so
    it counts that call's samplings). ``find_key``: a live key by id (the key ring's), None once revoked."""
    window = SamplingWindow()

    def for_loop(loop: LoopRequest, server: McpServerConfig) -> SamplingHandler:
        made = 0

        async def sample(question: SamplingRequest) -> SamplingAnswer:
            nonlocal made
            refusal = cap_refusal(server, made, window)
            if refusal is not None:
                if not loop.state.sampling.get("refused"):  # once per request: a looping server must not flood
                    log.warning("sampling for MCP server %s refused: %s", server.name, refusal)
                loop.state.add_sampling(0, 0, refused=True)
                raise SamplingRefused(refusal)
            made += 1
            route = server.sampling_route
            plan = lookup(route) if route else None
            if plan is None:
                raise SamplingRefused(f"sampling route {route!r} is not configured")
            key = find_key(loop.key_id) if loop.key_id else None
            if key is None:
                raise SamplingRefused("the key whose tool call asked is revoked or expired")
            parent = loop.span.traceparent() if loop.span.recording else None
            headers = [(b"traceparent", parent.encode())] if parent else []
            work = lifecycle.begin("POST", PATH, Incoming({"type": "http", "headers": headers}, _no_body))
            try:
                work.act_for(key)
                work.allow(plan)
                messages = canonical_messages(question)
                params: dict[str, Any] = {"max_tokens": max(1, min(question.max_tokens, server.sampling_max_tokens))}
                if question.temperature is not None:
                    params["temperature"] = question.temperature
                if question.stop_sequences:
                    params["stop"] = list(question.stop_sequences)[:4]
                size = sum(len(text_of(m.get("content"))) for m in messages)
                await work.admit(size, plan=plan, params=params)
                record = CallRecord()
                answer = await router.complete(preferred(plan, question.model_preferences),
                                               ModelRequest(messages=messages, params=params), record.attempts,
                                               plan.retries, time.monotonic() + request_timeout_s)
                response = answer.response
                record.answered(answer.target.label, response.model or answer.target.model, response.usage)
                work.account(record)
                loop.state.add_sampling(response.usage.prompt_tokens, response.usage.completion_tokens)
                await work.settle(record.usage)
            except BaseException as exc:  # given back whatever it is (``failed`` raises an exit again)
                error = await work.failed(exc)
                log.info("sampling for MCP server %s refused: %s", server.name, error.message)
                raise SamplingRefused(error.message) from None
            work.done(200)
            return SamplingAnswer(role="assistant", content={"type": "text", "text": text_of(response.message.get(
                "content"))}, model=record.model, stop_reason=_STOP.get(str(response.finish_reason), "endTurn"))

        return sample

    return for_loop

