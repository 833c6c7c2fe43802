"""The surfaces that run the tool loop (chat completions, Messages): a parser and a renderer each.

:class:`LoopSurface` holds the rest, in one order for both: authenticate → bounded body →
parse → plan and allow → way A (resume a paused loop from the caller's results) or a new loop
→ admit and watch → render → settle. The driver (``api/driver.py``) begins the work and answers
its failures; the renderer ends the work (``Work.done``): a JSON answer once built, a stream
when its last byte is sent or its caller is gone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from typing import Any, Generic, Protocol, TypeVar

from gateway.api.driver import Answer, deadline_of, read_body
from gateway.api.errors import error_response
from gateway.api.lifecycle import ErrorRenderer, Work
from gateway.api.planning import refuse_name_clashes, route_of, start_loop
from gateway.api.resume import resume_paused
from gateway.api.runtime import Runtime
from gateway.canonical import Message, NativeRequest, ToolDef
from gateway.http.incoming import Incoming
from gateway.loop.continuations import may_resume_way_a
from gateway.loop.events import LoopEvent
from gateway.loop.pairing import ToolResult
from gateway.loop.results import ResultSlot


class LoopCall(Protocol):
    """What a loop surface's parser gives the driver: the typed request, in canonical form."""

    model: str
    messages: list[Message]
    tools: list[ToolDef]
    tool_choice: Any
    params: dict[str, Any]
    max_tool_iterations: int | None
    headless: bool
    stream: bool
    stream_rescue: bool | None


Call = TypeVar("Call", bound=LoopCall)


class LoopSurface(Generic[Call]):
    """A surface that runs the tool loop: a parser (``parse``) and a renderer (``render``); the rest is here.

    The hooks with a default are what one surface does differently: its own header for the key
    (``identify``), the caller tools a server tool may not shadow (``caller_tools``), text sent
    beside way A's results (``follow_up``), the caller's own tool messages kept (``own_results``)
    and its request in its native format (``native``).
    """

    #: how the surface calls a caller's tool in a 400 about a name clash
    tool_kind = "client tool"

    def __init__(self, path: str, errors: ErrorRenderer = error_response) -> None:
        self.path = path
        self.errors = errors

    # -- what a surface writes ------------------------------------------------------------------
    def parse(self, body: Any, incoming: Incoming) -> Call:
        raise NotImplementedError

    def render(self, events: AsyncIterator[LoopEvent], call: Call, work: Work,
               slot: ResultSlot | None) -> Awaitable[Answer]:
        """The events as the surface's answer (JSON or its stream), ending ``work``; ``slot``: a resume's.

        The renderer's awaitable itself (no coroutine around it: no frame more on the hot path)."""
        raise NotImplementedError

    # -- what a surface may change --------------------------------------------------------------
    def identify(self, incoming: Incoming) -> None:
        """Where the caller's key is read from before authenticating (``Authorization``)."""

    def caller_tools(self, call: Call) -> list[ToolDef]:
        return call.tools

    def follow_up(self, messages: list[Message]) -> tuple[list[Message], list[Message] | None]:
        """(the conversation way A matches, the messages sent after the results: placed after the turn)."""
        return messages, None

    def own_results(self, results: dict[str, ToolResult], head: list[Message]) -> dict[str, ToolResult]:
        return results

    def native(self, call: Call) -> NativeRequest | None:
        return None

    # -- the run --------------------------------------------------------------------------------
    async def serve(self, work: Work, runtime: Runtime) -> Answer:
        incoming = work.incoming
        self.identify(incoming)
        key = await work.authenticate()
        call = self.parse(await read_body(work, runtime), incoming)
        plan = route_of(runtime, key, call.model)
        work.allow(plan)
        tools = self.caller_tools(call)
        if tools:
            refuse_name_clashes(runtime, plan, tools, call.model, self.tool_kind)
        headless = key.headless or call.headless or incoming.headless
        deadline = deadline_of(runtime)
        head, follow_up = self.follow_up(call.messages)
        way_a = (await runtime.continuations.way_a(key.tenant, head, key.id, key.name)
                 if may_resume_way_a(head) else None)  # no coroutine for a plain request
        slot: ResultSlot | None = None
        if way_a is not None:
            # Resume way A: continue from the stored transcript (with its hidden server-side exchanges).
            stored, results = way_a
            resumed = await resume_paused(runtime, work, stored, results=self.own_results(results, head),
                                          approved=[], decisions=None, stream=call.stream, headless=headless,
                                          deadline=deadline, conflict=f"continuation {stored.id} was already resumed",
                                          follow_up=follow_up, stream_rescue=call.stream_rescue)
            events = resumed.events
            slot = resumed.slot
        else:
            events = await start_loop(runtime, work, plan, messages=call.messages, client_tools=call.tools,
                                      tool_choice=call.tool_choice, params=call.params,
                                      max_tool_iterations=call.max_tool_iterations, headless=headless,
                                      stream=call.stream, deadline=deadline, native=self.native(call),
                                      stream_rescue=call.stream_rescue)
        work.show_limits()
        if call.stream:
            return await self.render(work.settled_at_end(events), call, work, slot)
        answer = await self.render(events, call, work, slot)
        await work.settle(work.usage())  # the loop's usage, as its Finished event reports
        return answer
