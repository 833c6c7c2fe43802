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

import time

from starlette.requests import Request

from gateway.api.messages.errors import anthropic_error
from gateway.api.messages.headers import betas_of, use_api_key
from gateway.api.messages.request import MessagesRequest, parse_messages_request
from gateway.api.messages.respond import respond_message
from gateway.api.planning import refuse_name_clashes, route_of, start_loop
from gateway.api.resume import resume_paused
from gateway.api.runtime import Runtime
from gateway.canonical import Message
from gateway.http.body import read_json
from gateway.http.incoming import Incoming
from gateway.http.json_response import JSONResponse
from gateway.http.sse_response import SSEResponse
from gateway.loop.continuations import may_resume_way_a
from gateway.loop.pairing import ToolResult
from gateway.routing.routes import RoutePlan

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


async def create_message(incoming: Incoming, runtime: Runtime) -> JSONResponse | SSEResponse:
    work = runtime.lifecycle.begin("POST", PATH, incoming, errors=anthropic_error)
    try:
        use_api_key(incoming)
        key = await work.authenticate()
        body = await read_json(incoming, runtime.config.server.max_body_bytes)
        parsed = parse_messages_request(body, betas_of(incoming))
        plan = route_of(runtime, key, parsed.model)
        work.allow(plan)
        _refuse_clashes(runtime, parsed, plan)
        headless = key.headless or parsed.headless or incoming.headless
        deadline = time.monotonic() + runtime.config.routing.request_timeout_s
        head, follow_up = _split_follow_up(parsed.messages)
        way_a = (await runtime.continuations.way_a(key.tenant, head, key.id, key.name)
                 if may_resume_way_a(head) else None)
        if way_a is not None:
            stored, results = way_a
            resumed = await resume_paused(runtime, work, stored, results=_with_client_messages(results, head),
                                          approved=[], decisions=None, stream=parsed.stream, headless=headless,
                                          deadline=deadline, conflict=f"continuation {stored.id} was already resumed",
                                          follow_up=follow_up, stream_rescue=parsed.stream_rescue)
            events = resumed.events
            slot = resumed.slot
        else:
            slot = None
            events = await start_loop(runtime, work, plan, messages=parsed.messages, client_tools=parsed.tools,
                                      tool_choice=parsed.tool_choice, params=parsed.params,
                                      max_tool_iterations=parsed.max_tool_iterations, headless=headless,
                                      stream=parsed.stream, deadline=deadline, native=parsed.native,
                                      stream_rescue=parsed.stream_rescue)
        work.show_limits()
        if parsed.stream:
            return await respond_message(work.settled_at_end(events), True, parsed.model, parsed.show_server_tools,
                                         work, slot)
        response = await respond_message(events, False, parsed.model, parsed.show_server_tools, work, slot)
        await work.settle(work.usage())
        return response
    except BaseException as exc:  # given back whatever it is (``failed`` raises an exit again)
        return work.render_error(await work.failed(exc))


def _refuse_clashes(runtime: Runtime, parsed: MessagesRequest, plan: RoutePlan) -> None:
    """A caller tool (custom or typed) named like a server tool of the route is a 400, as on chat completions."""
    if parsed.tool_names:
        named = [{"function": {"name": name}} for name in parsed.tool_names]
        refuse_name_clashes(runtime, plan, named, parsed.model, "tool")


async def messages_endpoint(request: Request) -> JSONResponse | SSEResponse:
    """Reached only for what ``FastChatPath`` passes on (it serves ``POST /v1/messages`` itself)."""
    return await create_message(Incoming(request.scope, request.receive), request.app.state.runtime)

