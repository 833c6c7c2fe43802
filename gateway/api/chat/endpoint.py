"""``POST /v1/chat/completions``: validate, plan, run the loop, render it."""

from __future__ import annotations

import logging
import time

from gateway.api.chat.request import parse_chat_request
from gateway.api.chat.respond import respond
from gateway.api.planning import refuse_name_clashes, route_of, start_loop
from gateway.api.resume import resume_paused
from gateway.api.runtime import Runtime
from gateway.http.body import read_json
from gateway.http.incoming import Incoming
from gateway.http.json_response import JSONResponse
from gateway.http.sse_response import SSEResponse
from gateway.loop.continuations import may_resume_way_a

log = logging.getLogger("loopgate.api")
PATH = "/v1/chat/completions"


async def chat_completions(request: Incoming, runtime: Runtime) -> JSONResponse | SSEResponse:
    work = runtime.lifecycle.begin("POST", PATH, request)
    try:
        key = await work.authenticate()
        body = await read_json(request, runtime.config.server.max_body_bytes)
        chat = parse_chat_request(body)
        plan = route_of(runtime, key, chat.model)
        work.allow(plan)
        if chat.tools:
            refuse_name_clashes(runtime, plan, chat.tools, chat.model, "client tool")
        headless = key.headless or chat.headless or request.headless
        deadline = time.monotonic() + runtime.config.routing.request_timeout_s
        continuations = runtime.continuations
        way_a = (await continuations.way_a(key.tenant, chat.messages, key.id, key.name)
                 if may_resume_way_a(chat.messages) else None)  # no coroutine for a plain request
        if way_a is not None:
            # Resume way A: continue from the stored transcript (with its hidden server-side exchanges).
            stored, results = way_a
            resumed = await resume_paused(runtime, work, stored, results=results, approved=[], decisions=None,
                                          stream=chat.stream, headless=headless, deadline=deadline,
                                          conflict=f"continuation {stored.id} was already resumed",
                                          stream_rescue=chat.stream_rescue)
            events = resumed.events
            slot = resumed.slot
        else:
            slot = None
            events = await start_loop(runtime, work, plan, messages=chat.messages, client_tools=chat.tools,
                                      tool_choice=chat.tool_choice, params=chat.params,
                                      max_tool_iterations=chat.max_tool_iterations, headless=headless,
                                      stream=chat.stream, deadline=deadline, stream_rescue=chat.stream_rescue)
        work.show_limits()
        if chat.stream:
            return await respond(work.settled_at_end(events), True, chat.include_usage, chat.model, work, slot)
        response = await respond(events, False, chat.include_usage, chat.model, work, slot)
        await work.settle(work.usage())  # the loop's usage, as its Finished event reports
        return response
    except BaseException as exc:  # given back whatever it is (``failed`` raises an exit again)
        return work.render_error(await work.failed(exc))
