"""The surfaces that run the tool loop (chat completions, Messages): a parser and a renderer each.

:class:`LoopSurface` holds the rest, in one order for both: authenticate → bounded body →
parse → plan and allow → way A (resume a paused loop from the caller's results) or a new loop
→ admit and watch → render → settle. The driver (``api/driver.py``) begins the work and answers
its failures; the renderer ends the work (``Work.done``): a JSON answer once built, a stream
when its last byte is sent or its caller is gone.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

from gateway.api.driver import Answer, Operation, deadline_of, read_body
from gateway.api.loop.planning import refuse_name_clashes, route_of, start_loop
from gateway.api.loop.resume import resume_paused
from gateway.api.request.errors import error_response
from gateway.api.request.lifecycle import ErrorRenderer, Work
from gateway.api.services import LoopServices, Services
from gateway.canonical import Message, NativeRequest, ToolDef
from gateway.http.incoming import Incoming
from gateway.loop.events import LoopEvent
from gateway.loop.pairing import ToolResult
from gateway.loop.results import ResultSlot
from gateway.loop.way_a import may_resume_way_a


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

    @property
    def native(self) -> NativeRequest | None:
        """The request in the surface's own wire format, when a target speaks it (Messages); None: canonical only."""


Call = TypeVar("Call", bound=LoopCall)


class LoopSurface(ABC, Generic[Call]):
    """A surface that runs the tool loop: a parser (``parse``) and a renderer (``render``); the rest is here.

    What one surface does differently: its own header for the key (``identify``), text sent beside
    way A's results (``follow_up``: splits it off), the caller tools a server tool may not shadow
    (``caller_tools``) and the caller's own tool messages kept (``own_results``). ``identify`` and
    ``follow_up`` are None where a surface has none (no call on chat's hot path).
    """

    #: how the surface calls a caller's tool in a 400 about a name clash
    tool_kind = "client tool"

    def __init__(self, path: str, errors: ErrorRenderer = error_response, *,
                 identify: Callable[[Incoming], None] | None = None,
                 follow_up: Callable[[list[Message]], tuple[list[Message], list[Message]]] | None = None,
                 operations: tuple[Operation[Any], ...] = ()) -> None:
        self.path = path
        self.errors = errors
        #: the surface's other methods and paths, which Starlette routes (``count_tokens``)
        self.operations = operations
        #: reads the caller's key from the surface's own header before authenticating (else ``Authorization``)
        self.identify = identify
        #: (the conversation way A matches, the messages sent after the results: placed after the turn)
        self.follow_up = follow_up

    # -- what a surface writes ------------------------------------------------------------------
    @abstractmethod
    def parse(self, body: Any, incoming: Incoming) -> Call:
        """The body as the surface's typed request (a 400 in its shape when it is not one)."""

    @abstractmethod
    def render(self, events: AsyncIterator[LoopEvent], call: Call, work: Work,
               slot: ResultSlot | None) -> Awaitable[Answer]:
        """The events as the surface's answer (JSON or its stream), ending ``work``; ``slot``: a resume's.

        The renderer's awaitable itself (no coroutine around it: no frame more on the hot path)."""

    # -- what a surface may change --------------------------------------------------------------
    def caller_tools(self, call: Call) -> list[ToolDef]:
        return call.tools

    def own_results(self, results: dict[str, ToolResult], head: list[Message]) -> dict[str, ToolResult]:
        return results

    # -- the run --------------------------------------------------------------------------------
    def services(self, every: Services) -> LoopServices:
        return every.loop

    async def serve(self, work: Work, services: LoopServices) -> Answer:
        incoming = work.incoming
        identify = self.identify
        if identify is not None:
            identify(incoming)
        key = await work.authenticate()
        call = self.parse(await read_body(work, services.max_body_bytes), incoming)
        plan = route_of(services.routes, key, call.model)
        work.allow(plan)
        tools = self.caller_tools(call)
        if tools:
            refuse_name_clashes(services.tools, plan, tools, call.model, self.tool_kind)
        headless = key.headless or call.headless or incoming.headless
        deadline = deadline_of(services.request_timeout_s)
        split = self.follow_up
        head, follow_up = (call.messages, None) if split is None else split(call.messages)
        way_a = (await services.continuations.way_a(key.tenant, head, key.id, key.name)
                 if may_resume_way_a(head) else None)  # no coroutine for a plain request
        slot: ResultSlot | None = None
        if way_a is not None:
            # Resume way A: continue from the stored transcript (with its hidden server-side exchanges).
            stored, results = way_a
            resumed = await resume_paused(services, work, stored, results=self.own_results(results, head),
                                          approved=[], decisions=None, stream=call.stream, headless=headless,
                                          deadline=deadline, conflict=f"continuation {stored.id} was already resumed",
                                          follow_up=follow_up, stream_rescue=call.stream_rescue)
            events = resumed.events
            slot = resumed.slot
        else:
            events = await start_loop(services, work, plan, messages=call.messages, client_tools=call.tools,
                                      tool_choice=call.tool_choice, params=call.params,
                                      max_tool_iterations=call.max_tool_iterations, headless=headless,
                                      stream=call.stream, deadline=deadline, native=call.native,
                                      stream_rescue=call.stream_rescue)
        work.show_limits()
        if call.stream:
            return await self.render(work.settled_at_end(events), call, work, slot)
        answer = await self.render(events, call, work, slot)
        await work.settle(work.usage())  # the loop's usage, as its Finished event reports
        return answer
