"""Running one Responses-API response: the loop's events, rendered and recorded.

``prepare.prepare_response`` decides what the loop runs on (this is where ``previous_response_id``
and answers to paused calls are resolved) and returns a :class:`ResponseRun`; everything that can
be refused is refused there, before anything is sent. ``ResponseRun.open()`` pulls the loop up to
its first output (so a request failing before any output gets a real HTTP status), and
``ResponseRun.events()`` yields the Responses stream events, storing the response record just
before the terminal event, so a client that saw ``response.completed`` can chain from it at once.
``ResponseRun.response`` is the Response object (final once the events are exhausted).

A run reads nothing from the surface's services: the records store and their TTL are handed to it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar, cast

import orjson

from gateway.api.request.errors import to_gateway_error
from gateway.api.responses.chain import Chain
from gateway.api.responses.events import TERMINAL, Batch, Frame
from gateway.api.responses.render import ResponseBuilder
from gateway.api.responses.request import ResponsesRequest
from gateway.api.responses.spliced import frames_body
from gateway.cancellation import EXITS
from gateway.canonical import Message, Usage
from gateway.loop.engine import LoopRequest
from gateway.loop.events import Finished, LoopEvent, LoopResult, Notice
from gateway.loop.pausing import gateway_extension
from gateway.store.responses.base import TRANSCRIPT_HEAD, ResponseRecords

_T = TypeVar("_T")
_ITEM_PREFIX = {"message": "msg", "function_call_output": "fco", "mcp_approval_response": "mcpa"}


class ResponseRun:
    """A prepared response; see the module docstring. Public API used by background mode too."""

    __slots__ = ("_chain", "_events", "_final", "_first", "_instructions_first", "_loop", "_records", "_ttl_s",
                 "builder", "request", "tenant")

    def __init__(self, records: ResponseRecords, ttl_s: float, tenant: str, request: ResponsesRequest,
                 loop: LoopRequest, events: AsyncIterator[LoopEvent], builder: ResponseBuilder,
                 instructions_first: bool, chain: Chain | None = None) -> None:
        #: where the record is written, and for how long (``store.continuation_ttl_s``)
        self._records = records
        self._ttl_s = ttl_s
        self.tenant = tenant
        self.request = request
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
            feed = builder.feed
            async for loop_event in self._events:
                if waiting and loop_event.__class__ is not Notice:  # exact classes, as ``builder.feed`` reads them
                    waiting = False
                    on_output()  # type: ignore[misc]
                feed(loop_event)
                if store and loop_event.__class__ is Finished:  # ``save``'s stored case, without its call
                    await self._records.put(self.tenant, builder.response["id"], self.record(loop_event), self._ttl_s)
            if waiting:
                on_output()  # type: ignore[misc]
            if not builder.done:
                raise RuntimeError("the loop ended without a result")
        finally:
            await self._events.aclose()  # type: ignore[attr-defined]  # ``aclose()`` without its coroutine

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

    def unrun(self) -> Finished:
        """The end of a response whose loop is not run (``generate: false``, the WebSocket mode's warm-up:
        ``responses/ws_prepared.py``): completed, no output, no usage; the loop's meter is told it finished."""
        loop = self._loop
        result = LoopResult("completed", "stop", Usage(), gateway_extension(loop.state, "completed"))
        if loop.on_finish is not None:
            loop.on_finish(result)
        return Finished(result)

    def record(self, finished: Finished | None = None, chained: bool = True) -> dict[str, Any]:
        """The stored record of this response as it stands (what ``GET`` and ``previous_response_id`` read).

        ``{"response": the Response object, "input": the input items as sent (``input_items``
        gives them ids on read), "transcript_head": the canonical messages to continue from (a
        completed loop only, without this response's instructions) but its final answer, whose
        text the Response object holds (store/responses/base.py: stored once), or None,
        "continuation_id": the paused loop's continuation (a paused loop only) or None,
        "instructions_first": whether that continuation's transcript starts with the
        instructions}``, and for a follow-up whose parent's messages are unchanged,
        ``"ancestors"``: the responses it continues, root first, its ``transcript_head`` then being
        only what it adds (not when ``chained`` is False: the whole conversation then). Without
        ``finished`` (still running, or failed) it only describes.
        """
        builder = self.builder
        response: Any = builder.response
        head: list[Message] | None = None
        continuation_id: str | None = None
        ancestors: list[str] | None = None
        if finished is not None:
            result = finished.result
            if result.status == "paused":
                continuation_id = result.gateway.get("continuation_id")
            else:
                head = self._loop.messages[1:] if self._instructions_first else self._loop.messages
                chain = self._chain
                if chain is not None and chain.ancestors and chained:
                    segment = chain.segment(head)
                    if segment is not None:
                        head, ancestors = segment, chain.ancestors
            if builder.done and not builder.large:
                # Final now: serialised once, reused for the answer (a large one is spliced into its frame instead).
                final = self._final = orjson.dumps(response)
                response = orjson.Fragment(final)
        # The input as the caller sent it: ``input_items`` gives the items without an id theirs on read.
        record = {"response": response, "input": self.request.input, TRANSCRIPT_HEAD: head,
                  "continuation_id": continuation_id, "instructions_first": self._instructions_first}
        if ancestors is not None:
            record["ancestors"] = ancestors
        return record

    def save(self, finished: Finished | None = None) -> Awaitable[None]:
        """Write ``record(finished)`` with the store's TTL, unless the request said ``store: false``: then only
        a records view that keeps such responses (a WebSocket connection's memory) is handed it.

        The store's own awaitable (the record is made at the call): no coroutine of this method's around it."""
        records = self._records
        if self.request.store:
            return records.put(self.tenant, self.builder.response["id"], self.record(finished), self._ttl_s)
        if records.keeps_unstored:  # the whole conversation, and the answer's text
            return records.keep(self.tenant, self.builder.response["id"], self.record(finished, chained=False),
                                "".join(self.builder.final_text))
        return _nothing()


def _same(batch: Batch) -> Batch:
    return batch


async def _nothing() -> None:
    return None


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
