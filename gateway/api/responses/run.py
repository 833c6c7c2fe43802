"""One Responses-API response: from a parsed request to the loop's events, rendered and recorded.

``prepare_response`` decides what the loop runs on (this is where ``previous_response_id`` and
answers to paused calls are resolved) and returns a :class:`ResponseRun`; everything that can be
refused is refused there, before anything is sent. ``ResponseRun.open()`` pulls the loop up to
its first output (so a request failing before any output gets a real HTTP status), and
``ResponseRun.events()`` yields the Responses stream events, storing the response record just
before the terminal event, so a client that saw ``response.completed`` can chain from it at once.
``ResponseRun.response`` is the Response object (final once the events are exhausted).

The loop itself is the one engine: a new conversation is a plain ``LoopRequest``; answering a
paused ``function_call`` / ``mcp_approval_request`` goes through the continuation claim exactly
like ``POST /v1/continuations/{id}`` (at most once, approved tools ledgered).
"""

# Long by design: one Responses run (new, continued with previous_response_id, or resuming a pause)
# is prepared and driven here; the states share the run's builder and transcript, which one module
# keeps in view.

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import orjson

from gateway.api.errors import to_gateway_error
from gateway.api.lifecycle import Work
from gateway.api.planning import refuse_name_clashes, route_of
from gateway.api.responses.chain import Chain, check_quota, parent_chain, previous_not_found
from gateway.api.responses.items import Converted, to_messages
from gateway.api.responses.origin import responses_origin
from gateway.api.responses.render import (
    TERMINAL,
    Batch,
    Frame,
    ResponseBuilder,
    ResponseRecorder,
    response_id,
    server_label,
)
from gateway.api.responses.request import ResponsesRequest
from gateway.api.responses.spliced import frames_body
from gateway.api.resume import check_pending, resume_paused
from gateway.cancellation import EXITS
from gateway.canonical import Message
from gateway.errors import GatewayError, bad_request, quoted
from gateway.loop.artifacts import reattach
from gateway.loop.continuations import Continuations
from gateway.loop.engine import LoopRequest, run_loop
from gateway.loop.events import Finished, LoopEvent, Notice
from gateway.loop.pairing import pairing_problem
from gateway.routing.routes import RoutePlan
from gateway.store.continuations.base import Continuation, ContinuationNotFound
from gateway.store.responses.base import TRANSCRIPT_HEAD, continuable
from gateway.tools.registry import ToolRegistry

if TYPE_CHECKING:  # the Responses surface is still given the composition root (api/runtime.py)
    from gateway.api.runtime import Runtime

_T = TypeVar("_T")
_NO_APPROVALS: frozenset[str] = frozenset()
_ANSWERS = frozenset({"function_call_output", "mcp_approval_response"})
_ITEM_PREFIX = {"message": "msg", "function_call_output": "fco", "mcp_approval_response": "mcpa"}


class ResponseRun:
    """A prepared response; see the module docstring. Public API used by background mode too."""

    __slots__ = ("_chain", "_events", "_final", "_first", "_instructions_first", "_loop", "builder", "label", "plan",
                 "request", "runtime", "tenant")

    def __init__(self, runtime: Runtime, tenant: str, request: ResponsesRequest, plan: RoutePlan,
                 loop: LoopRequest, events: AsyncIterator[LoopEvent], builder: ResponseBuilder,
                 instructions_first: bool, chain: Chain | None = None) -> None:
        self.runtime = runtime
        self.tenant = tenant
        self.request = request
        self.plan = plan
        self.label = plan.metric_label
        self.builder = builder
        self._loop = loop
        self._events = events
        self._instructions_first = instructions_first
        #: the conversation this response continues (previous_response_id): stored by reference, not copied
        self._chain = chain
        self._first: list[LoopEvent] = []
        # The final Response object serialised once, at the terminal save: the stored record and
        # the answer (JSON body or terminal stream event) embed these bytes instead of re-encoding.
        self._final: bytes | None = None

    @property
    def loop_request(self) -> LoopRequest:
        """The loop this response runs (the usage meter watches it)."""
        return self._loop

    @property
    def id(self) -> str:
        return self.builder.id

    @property
    def response(self) -> dict[str, Any]:
        return self.builder.response

    async def open(self) -> None:
        """Run the loop up to its first output (errors propagate: nothing has been sent yet)."""
        try:
            while True:
                event = await anext(self._events, None)
                if event is None:
                    return
                self._first.append(event)
                if not isinstance(event, Notice):
                    return
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Stop the loop (cancels running tools, releases a claim): safe to call more than once."""
        await self._events.aclose()  # type: ignore[attr-defined]

    def response_json(self) -> bytes:
        """The Response object as JSON (the bytes already made for the record when there are some)."""
        return self._final if self._final is not None and self.builder.done else orjson.dumps(self.builder.response)

    async def complete(self, on_output: Callable[[], None] | None = None) -> None:
        """The non-stream run: ``open()`` then ``batches(raise_errors=True)``, without their generator layers.

        The same builder steps, the same save before the end; any failure propagates (the
        endpoint answers it with an HTTP error). ``on_output`` is called where ``open()`` would
        have returned (the first output, or the loop's end). Every request pays for generator
        layers, so the JSON path runs the loop from this one coroutine.
        """
        builder = self.builder
        store = self.request.store  # ``save`` writes nothing without it: no coroutine for nothing
        try:
            first, self._first = self._first, []
            if first or on_output is None:
                waiting = False
                if on_output is not None:
                    on_output()
            else:
                waiting = True
            builder.start()
            for loop_event in first:
                builder.feed(loop_event)
                if isinstance(loop_event, Finished) and store:
                    await self.save(loop_event)
            async for loop_event in self._events:
                if waiting and not isinstance(loop_event, Notice):
                    waiting = False
                    on_output()  # type: ignore[misc]
                builder.feed(loop_event)
                if isinstance(loop_event, Finished) and store:
                    await self.save(loop_event)
            if waiting:
                on_output()  # type: ignore[misc]
            if not builder.done:
                raise RuntimeError("the loop ended without a result")
        finally:
            await self.aclose()

    async def events(self, raise_errors: bool = False) -> AsyncIterator[dict[str, Any]]:
        """The Responses stream events, ``response.created`` to the one terminal event.

        A failure after the start ends with ``response.failed`` (also recorded), or is raised
        with ``raise_errors`` (the non-stream endpoint answers it with an HTTP error instead).
        Events are only materialised when the request streams (or runs in the background):
        otherwise the builder runs the same steps and the lists hold only the terminal-event marker.
        """
        async for batch in self.batches(raise_errors):
            for event in batch:
                yield event

    def batches(self, raise_errors: bool = False) -> AsyncIterator[Batch]:
        """``events()`` grouped by the loop event that produced them (one network write per upstream read)."""
        return self._run(raise_errors, _same)

    def frames(self, encode: Callable[[Batch], bytes],
               on_close: Callable[[], Awaitable[None]]) -> AsyncIterator[Frame]:
        """``batches()`` encoded by ``encode``, ``on_close`` awaited at the end: the SSE body with no extra layer.

        A batch with a large text's frame in it (``builder.large``) is written in slices instead
        (responses/spliced.py)."""
        return self._run(False, encode, on_close)

    async def _run(self, raise_errors: bool, wrap: Callable[[Batch], _T],
                   on_close: Callable[[], Awaitable[None]] | None = None) -> AsyncIterator[_T]:
        builder = self.builder
        try:
            yield wrap(builder.start())
            try:
                for loop_event in self._first:
                    batch = await self._feed(loop_event, raise_errors)
                    if batch:
                        yield cast(_T, frames_body(batch)) if builder.large else wrap(batch)
                self._first = []
                feed = builder.feed
                async for loop_event in self._events:
                    # Only the terminal event saves: the others skip ``_feed``'s coroutine (one per chunk).
                    batch = await self._feed(loop_event, raise_errors) if isinstance(loop_event, Finished) \
                        else feed(loop_event)
                    if batch:
                        yield cast(_T, frames_body(batch)) if builder.large else wrap(batch)
                if not builder.done:
                    raise RuntimeError("the loop ended without a result")
            except BaseException as exc:  # a native library's panic fails the response too; an exit passes
                if raise_errors or builder.done or isinstance(exc, EXITS):
                    raise
                failed = builder.fail(to_gateway_error(exc))
            else:
                return
            # Out of the ``except``: the exception's traceback holds the frames it passed through (an upstream
            # stream's kept text among them), let go before the end is stored and written.
            with contextlib.suppress(Exception):  # the store may be what failed: the stream still ends cleanly
                await self.save(None)
            yield cast(_T, frames_body(failed)) if builder.large else wrap(failed)
        finally:
            try:
                await self.aclose()
            finally:
                if on_close is not None:
                    await on_close()

    async def _feed(self, loop_event: LoopEvent, raise_errors: bool) -> Batch:
        out = self.builder.feed(loop_event)
        if isinstance(loop_event, Finished):
            try:
                await self.save(loop_event)
            except Exception as exc:
                # Not recorded: the client must not see "completed" for a response it cannot chain from.
                if raise_errors:
                    raise
                self._final = None
                self.builder.retract_terminal(out)
                out.extend(self.builder.fail(to_gateway_error(exc)))
            else:
                # A framed (SSE) terminal event carries the bytes the record was made of
                # (background runs keep plain dicts: their consumers read the events).
                if out and out[-1] is TERMINAL:
                    out[-1] = self.builder.terminal_frame(self._final)
        return out

    def record(self, finished: Finished | None = None) -> dict[str, Any]:
        """The stored record of this response as it stands (what ``GET`` and ``previous_response_id`` read).

        ``{"response": the Response object, "input": the input items as sent (``input_items``
        gives them ids on read), "transcript_head": the canonical messages to continue from (a
        completed loop only, without this response's instructions) but its final answer, whose
        text the Response object holds (store/responses/base.py: stored once), or None,
        "continuation_id": the paused loop's continuation (a paused loop only) or None,
        "instructions_first": whether that continuation's transcript starts with the
        instructions}``, and for a follow-up whose parent's messages are unchanged,
        ``"ancestors"``: the responses it continues, root first, its ``transcript_head`` then being
        only what it adds. Without ``finished`` (still running, or failed) it only describes.
        """
        head: list[Message] | None = None
        continuation_id: str | None = None
        ancestors: list[str] | None = None
        if finished is not None and finished.result.status == "paused":
            continuation_id = finished.result.gateway.get("continuation_id")
        elif finished is not None:
            messages = self._loop.messages[1:] if self._instructions_first else self._loop.messages
            chain = self._chain
            if chain is not None and chain.ancestors:
                segment = chain.segment(messages)
                if segment is not None:
                    messages, ancestors = segment, chain.ancestors
            head = messages
        response: Any = self.builder.response
        if finished is not None and self.builder.done and not self.builder.large:
            # Final now: serialised once, reused for the answer (a large one is spliced into its frame instead).
            self._final = orjson.dumps(response)
            response = orjson.Fragment(self._final)
        # The input as the caller sent it: ``input_items`` gives the items without an id theirs on read.
        record = {"response": response, "input": self.request.input, TRANSCRIPT_HEAD: head,
                  "continuation_id": continuation_id, "instructions_first": self._instructions_first}
        if ancestors is not None:
            record["ancestors"] = ancestors
        return record

    async def save(self, finished: Finished | None = None) -> None:
        """Write ``record(finished)`` with the store's TTL, unless the request said ``store: false``."""
        if self.request.store:
            runtime = self.runtime
            await runtime.responses.put(self.tenant, self.builder.response["id"], self.record(finished),
                                        runtime.config.store.continuation_ttl_s)


def _same(batch: Batch) -> Batch:
    return batch


def input_items(response_id: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A stored response's input items as ``input_items`` lists them: each with an id.

    An item the caller sent without an id gets one made of the response id and its position, so
    reading it twice gives the same id and writing the record needs no copy of the input.
    """
    tail = response_id.removeprefix("resp_")
    return [_listed(item if isinstance(item.get("id"), str) else
                    {"id": f"{_ITEM_PREFIX.get(item['type'], 'item')}_{tail}{index:04x}", **item})
            for index, item in enumerate(items)]


def _listed(item: dict[str, Any]) -> dict[str, Any]:
    """A message item in OpenAI's listed shape: ``content`` always a list of parts.

    Callers may send a message's content as a string (``EasyInputMessage``); OpenAI lists it as
    parts (``input_text``, or ``output_text`` for an assistant's), and SDKs read ``content[0].text``.
    """
    content = item.get("content")
    if item.get("type") != "message" or not isinstance(content, str):
        return item
    if item.get("role") == "assistant":
        return {**item, "status": item.get("status") or "completed",
                "content": [{"type": "output_text", "text": content, "annotations": []}]}
    return {**item, "content": [{"type": "input_text", "text": content}]}


@functools.lru_cache(maxsize=16)
def _labels(tools: ToolRegistry) -> Callable[[str], str]:
    """The server-label function of a tool registry: made once per registry, not once per request."""

    def label(name: str) -> str:
        tool = tools.get(name)
        return server_label(tool.source.name) if tool is not None else "loopgate"

    return label


def label_of(runtime: Runtime) -> Callable[[str], str]:
    """The server-label function of the runtime's tools (a decided pause's renderer uses it too)."""
    return _labels(runtime.tools)


async def prepare_response(request: ResponsesRequest, runtime: Runtime, work: Work,
                           headless: bool, plan: RoutePlan | None = None) -> ResponseRun:
    """Resolve the request to a loop (new, continued, or a paused one resumed); raises GatewayError.

    ``work`` is admitted here, once it is known who is charged (a resume: the key that asked), and
    before anything is claimed or run. ``plan``: the route of ``request.model`` when the caller
    already looked it up.
    """
    key = work.key
    assert key is not None, "authenticated by the caller"
    tenant = key.tenant
    if plan is None:
        plan = route_of(runtime.routes, key, request.model)
    if request.tools:
        refuse_name_clashes(runtime.tools, plan, request.tools, request.model, "function tool")
    converted = to_messages(request.input)
    if request.store:
        await check_quota(runtime, tenant)
    deadline = time.monotonic() + runtime.config.routing.request_timeout_s
    continuations = runtime.continuations
    record: dict[str, Any] | None = None
    if request.previous_response_id is not None:
        record = await runtime.responses.get(tenant, request.previous_response_id)
        if record is None:
            raise previous_not_found(request.previous_response_id)
    if record is not None and record.get("continuation_id"):
        # Answering a paused response: only answers, and they resume its loop through the claim.
        for index, item in enumerate(request.input):
            if item["type"] not in _ANSWERS:
                raise bad_request(f"response {quoted(request.previous_response_id)} waits for answers to its "
                                  "function_call / mcp_approval_request items: send only function_call_output "
                                  "and mcp_approval_response items", f"input[{index}]")
        try:
            stored = await runtime.store.get_continuation(record["continuation_id"], tenant)
        except ContinuationNotFound:
            raise previous_not_found(str(request.previous_response_id)) from None
        return await _resume(request, runtime, work, headless, stored, converted, deadline,
                             bool(record.get("instructions_first")))
    if record is None and converted.decisions and converted.orphan is None:
        stored_match = await _paused_match(continuations, runtime, tenant, converted)
        if stored_match is not None:
            return await _resume(request, runtime, work, headless, stored_match, converted, deadline, None)
    if converted.orphan is not None:
        raise bad_request("no function_call or mcp_approval_request in the input has this call id; to answer a "
                          "stored response, send 'previous_response_id'", converted.orphan)
    if converted.approved:
        raise bad_request("this mcp_approval_response approves a call that is not pending on this gateway (unknown, "
                          "expired or already answered)", "input")
    messages: list[Message] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    chain: Chain | None = None
    if record is not None:
        if not continuable(record):
            raise bad_request(f"response {quoted(request.previous_response_id)} did not complete; it cannot be "
                              "continued", "previous_response_id")
        assert request.previous_response_id is not None
        earlier, chain = await parent_chain(runtime, tenant, request.previous_response_id, record)
        messages.extend(earlier)
    messages.extend(converted.messages)
    if len(messages) == (1 if request.instructions else 0):
        raise bad_request("'input' is required (a string or a non-empty array of items)", "input")
    problem = pairing_problem(messages)
    if problem is not None:
        raise bad_request(f"the input does not form a valid conversation: {problem}", "input")
    await work.admit(work.incoming.body_bytes, plan=plan, params=request.params)
    if plan.needs_artifacts:
        await reattach(runtime.store, tenant, messages)
    loop = LoopRequest(plan=plan, messages=messages, client_tools=request.tools, tool_choice=request.tool_choice,
                       params=request.params, max_iterations=_max_iterations(plan, request), headless=headless,
                       tenant=tenant, stream=request.stream, deadline=deadline, key_id=key.id, key_name=key.name,
                       allowed_tools=key.tools, stream_rescue=request.stream_rescue)
    builder = ResponseBuilder(response_id(), request.model, request.echo, label_of(runtime), _NO_APPROVALS, None,
                              request.stream or request.background, request.stream and not request.background)
    loop.origin = responses_origin(builder.id, request, bool(request.instructions))
    return ResponseRun(runtime, tenant, request, plan, loop, run_loop(loop, runtime.deps), builder,
                       bool(request.instructions), chain)


def _max_iterations(plan: RoutePlan, request: ResponsesRequest) -> int:
    limit = plan.max_tool_iterations
    if request.max_tool_iterations is None and request.max_tool_calls is None:
        return limit
    for cap in (request.max_tool_iterations, request.max_tool_calls):
        if cap is not None:
            limit = min(limit, cap)
    return limit


async def _paused_match(continuations: Continuations, runtime: Runtime, tenant: str,
                        converted: Converted) -> Continuation | None:
    """A resent conversation ending in answers: the paused loop they answer, if it is this conversation's."""
    found = await runtime.store.find_continuation_by_tool_call(tenant, converted.decisions[0]["tool_call_id"])
    if found is None:
        return None
    try:
        stored = await runtime.store.get_continuation(found, tenant)
    except ContinuationNotFound:
        return None
    return stored if continuations.history_mismatch(stored, converted.messages) is None else None


async def _resume(request: ResponsesRequest, runtime: Runtime, work: Work, headless: bool, stored: Continuation,
                  converted: Converted, deadline: float, instructions_first: bool | None) -> ResponseRun:
    """Resume a paused loop with the input's answers (way B's checks, claim, ledger, audit and notifications).

    The caller decides; the key that asked is charged (``Work.charge_to``), admitted before the claim.
    """
    conflict = f"the pending calls of this response were already answered (continuation {stored.id})"
    check_pending(stored, conflict)
    try:
        assert work.key is not None, "authenticated by the caller"
        results, approved, answers = await runtime.continuations.checked_decisions(
            stored, converted.decisions, work.key.id, work.key.name)
    except GatewayError as error:
        error.param = "input"
        raise
    resumed = await resume_paused(runtime.services.loop, work, stored, results=results, approved=approved,
                                  answers=answers, decisions=converted.decisions, stream=request.stream,
                                  headless=headless, deadline=deadline, conflict=conflict,
                                  stream_rescue=request.stream_rescue)
    loop = resumed.loop
    first = bool(instructions_first)
    if instructions_first is not None:  # previous_response_id: this request's instructions replace the stored ones
        if instructions_first and loop.messages:
            del loop.messages[0]
        if request.instructions:
            loop.messages.insert(0, {"role": "system", "content": request.instructions})
        first = bool(request.instructions)
    builder = ResponseBuilder(response_id(), request.model, request.echo, label_of(runtime), frozenset(approved),
                              emit=request.stream or request.background,
                              frames=request.stream and not request.background)
    resumed.slot.recorder = ResponseRecorder(builder, request.echo)
    loop.origin = responses_origin(builder.id, request, first)  # a pause of it is decided as this response
    assert work.key is not None
    return ResponseRun(runtime, work.key.tenant, request, resumed.plan, loop, resumed.events, builder, first)
