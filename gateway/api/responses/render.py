"""The third renderer: loop events -> a Responses stream and the Response object it describes.

One class, :class:`ResponseBuilder`, consumes the engine's ``LoopEvent`` s and produces both the
stream events (dicts with ``type`` and ``sequence_number``) and the final Response object, so
a streamed and a non-streamed response can never disagree: the non-stream path runs the very
same builder and throws the events away. This module decides which items a loop event opens,
fills and closes; how an event is written (a dict, a pre-encoded SSE frame, nothing) and the
Response object's layout are ``responses/events.py``.

Mapping: text -> ``message`` items with one ``output_text`` part (a new item after each tool
round); reasoning text -> ``reasoning`` items with a ``summary_text`` part; each server tool
execution -> an ``mcp_call`` item (``server_label`` = its MCP server's name or ``loopgate``);
a paused turn's client calls -> ``function_call`` items (with their ``namespace``) or
``custom_tool_call`` items (``responses/calls.py``), its approval-required calls ->
``mcp_approval_request`` items (the response is ``completed`` there, as OpenAI's are); a hosted
tool a target ran (a mapped web search) -> a ``web_search_call`` item. A
``max_output_tokens`` cut-off is ``incomplete``; a failure after the start is ``failed``
(the router's commit point guarantees nothing already sent is repeated).

Item ids carry the tool call id (``mcp_<call>``, ``mcpr_<call>``, ``fc_<call>``, ``ctc_<call>``) so items coming
back as input map onto the transcript without any lookup (see ``responses/items.py``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import orjson

from gateway.api.responses.calls import NO_DROPS, CallItems
from gateway.api.responses.events import (
    ADDED_WS,
    DELTA_HEAD,
    DELTA_HEAD_WS,
    DELTA_TAIL,
    DELTA_TAIL_WS,
    MESSAGE_CLOSED,
    MESSAGE_OPENED,
    PART_ADDED_WS,
    SILENT,
    STATUS,
    TERMINAL,
    Batch,
    ResponseEvents,
    usage_object,
)
from gateway.api.responses.ids import item_ids
from gateway.api.responses.reasoning import Carrier
from gateway.api.responses.spliced import LARGE_CHARS, NUL, spliced
from gateway.canonical import Answering, HostedToolCall, ReasoningDelta, TextDelta
from gateway.errors import GatewayError
from gateway.http.websocket_frames import HEADS, text_frame
from gateway.loop.engine import ITERATION_SEPARATOR
from gateway.loop.events import (
    Finished,
    LoopEvent,
    LoopResult,
    ToolFinished,
    ToolProgress,
    ToolStarted,
    TurnArtifacts,
)


class ResponseBuilder(CallItems):
    """Builds one Response from loop events; see the module docstring.

    ``start()`` gives ``response.created`` / ``response.in_progress``; ``feed(event)`` the events
    one loop event produces (the terminal one included, for ``Finished``); ``fail(error)`` closes
    open items and gives ``response.failed``. ``response`` is the Response object at any time
    (final once ``done``). ``label_of(name)`` is the server label of a server tool;
    ``approved`` the call ids a human approved (their ``mcp_call`` items name the request).
    """

    __slots__ = ("_delta_head", "_items", "_open", "_open_id", "_open_json", "_open_type", "_parts", "_texted",
                 "_tools", "approved", "carrier", "done", "final_text", "label_of", "notes", "result", "route")

    def __init__(self, rid: str, route: str, echo: dict[str, Any], label_of: Callable[[str], str],
                 approved: frozenset[str] = frozenset(), created_at: int | None = None, emit: bool = True,
                 frames: bool = False, item_base: str = "") -> None:
        ResponseEvents.__init__(self, rid, route, echo, created_at, emit, frames)
        self.names = None  # what ``CallItems`` renders by: set by the run when the request has any
        self.hosted_drops = NO_DROPS
        self.sources = False
        # Set by the run when the request asks for reasoning.encrypted_content (``responses/reasoning.py``), and
        # the warnings it knows before the loop runs (reasoning items of the input dropped).
        self.carrier: Carrier | None = None
        self.notes: tuple[dict[str, Any], ...] = ()
        self.route = route
        self._delta_head = b""
        self.label_of = label_of
        self.approved = approved
        self.done = False
        self.result: LoopResult | None = None
        # The closed messages' text since the last tool started: the transcript's final assistant message.
        self.final_text: list[str] = []
        self._open: int | None = None  # output index of the open message or reasoning item
        self._open_type: str | None = None  # its type and id (read on every delta)
        self._open_id = ""
        self._open_json = b""  # ``frames``: the open item's id as JSON
        self._parts: list[str] = []
        self._tools: dict[str, int] = {}  # running mcp_call items by tool call id
        self._texted = False
        self._items = (item_base, itertools.count()) if item_base else item_ids()  # item_base: ``response_ids``'

    @property
    def id(self) -> str:
        return str(self.response["id"])

    def _item_id(self, kind: str) -> str:
        base, counter = self._items
        return kind + base + format(next(counter), "04x")

    # -- items -----------------------------------------------------------------------------
    def _close(self, out: Batch, status: str = "completed") -> None:
        if self._open is None:
            return
        index, self._open, self._open_type = self._open, None, None
        item = self.response["output"][index]
        text = "".join(self._parts)
        self._parts = []
        emit = self.emit
        if item["type"] == "message":
            self.final_text.append(text)  # a message's text is the last model call's (until a tool starts)
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            if self.frames or self.socket:
                item["content"] = [part]
                item["status"] = status
                if self.socket:
                    out += self._socket_closed(item, index, self._open_json, text, status)
                    return
                item_id = self._open_json
                large = len(text) > LARGE_CHARS
                self.large = self.large or large
                encoded = NUL if large else orjson.dumps(text)
                seq = self._seq
                self._seq += 3
                frame = MESSAGE_CLOSED % (item_id, index, encoded, seq, item_id, index, encoded, seq + 1, index,
                                           item_id, STATUS.get(status) or orjson.dumps(status), encoded, seq + 2)
                out.append(spliced(frame, [text] * 3) if large else frame)
                return
            if emit:
                out.append(self._event("response.output_text.done", {"item_id": item["id"], "output_index": index,
                                                                     "content_index": 0, "text": text, "logprobs": []}))
                out.append(self._event("response.content_part.done", {"item_id": item["id"], "output_index": index,
                                                                      "content_index": 0, "part": part}))
            item["content"] = [part]
            item["status"] = status
        elif (self.frames or self.socket) and len(text) > LARGE_CHARS:
            self._close_large_reasoning(item, index, text, status, out)
            return
        elif not text and "encrypted_content" in item:  # a reasoning item that only carries a turn's artifacts
            item["status"] = status
        else:
            summary = {"type": "summary_text", "text": text}
            if emit:
                out.append(self._event("response.reasoning_summary_text.done", {"item_id": item["id"],
                                                                                "output_index": index,
                                                                                "summary_index": 0, "text": text}))
                out.append(self._event("response.reasoning_summary_part.done", {"item_id": item["id"],
                                                                                "output_index": index,
                                                                                "summary_index": 0, "part": summary}))
            item["summary"] = [summary]
            item["status"] = status
        if emit:
            self._done(index, out)

    def _text(self, text: str, out: Batch) -> None:
        if self._open_type != "message":
            if text == ITERATION_SEPARATOR and self._texted:
                return  # the engine's separator between iterations: here each iteration is its own item
            if self._open is not None:
                self._close(out)
            item_id = self._open_id = self._item_id("msg")
            self._open_type = "message"
            self._texted = True
            item = {"id": item_id, "type": "message", "role": "assistant", "status": "in_progress", "content": []}
            if self.frames or self.socket:
                output = self.response["output"]
                index = self._open = len(output)
                output.append(item)
                encoded = self._open_json = orjson.dumps(item_id)
                seq = self._seq
                self._seq += 2
                if self.frames:
                    self._delta_head = DELTA_HEAD % (encoded, index)
                    out.append(MESSAGE_OPENED % (index, encoded, seq, encoded, index, seq + 1))
                else:
                    self._delta_head = DELTA_HEAD_WS % (encoded, index)
                    out += (text_frame(ADDED_WS % (index, encoded, seq)),
                            text_frame(PART_ADDED_WS % (encoded, index, seq + 1)))
            elif self.emit:
                self._open = self._add(item, out)
                out.append(self._event("response.content_part.added", {
                    "item_id": item_id, "output_index": self._open, "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}))
            else:  # a JSON answer: what ``_add`` does without events
                output = self.response["output"]
                self._open = len(output)
                output.append(item)
        self._parts.append(text)
        if self.frames:
            out.append(self._delta_head + orjson.dumps(text) + DELTA_TAIL % self._seq)
        elif self.emit:  # the one event per upstream chunk: built directly (same keys, same order as ``_event``)
            if self.socket:  # its WebSocket frame: head and data side by side in the batch (one copy, at the join)
                data = self._delta_head + orjson.dumps(text) + DELTA_TAIL_WS % self._seq
                out += (HEADS[len(data)], data)
                self._seq += 1
                return
            out.append({"item_id": self._open_id, "output_index": self._open, "content_index": 0, "delta": text,
                        "logprobs": [], "type": "response.output_text.delta", "sequence_number": self._seq})
        self._seq += 1

    def _reasoning(self, text: str, out: Batch) -> None:
        if self._open_type != "reasoning":
            self._close(out)
            item_id = self._open_id = self._item_id("rs")
            self._open = self._add({"id": item_id, "type": "reasoning", "summary": [], "status": "in_progress"}, out)
            self._open_type = "reasoning"
            out.append(self._event("response.reasoning_summary_part.added", {
                "item_id": item_id, "output_index": self._open, "summary_index": 0,
                "part": {"type": "summary_text", "text": ""}}))
        self._parts.append(text)
        out.append(self._event("response.reasoning_summary_text.delta", {
            "item_id": self.response["output"][self._open]["id"], "output_index": self._open, "summary_index": 0,
            "delta": text}))

    def _carry(self, turn: TurnArtifacts, out: Batch) -> None:
        """A model call's artifacts, sealed into the reasoning item still open (this call's), else into one of
        their own (``responses/reasoning.py``); the item is closed with them."""
        token = self.carrier.token(turn) if self.carrier is not None else ""
        if not token:
            return
        if self._open_type != "reasoning":
            self._close(out)
            item_id = self._open_id = self._item_id("rs")
            self._open = self._add({"id": item_id, "type": "reasoning", "summary": [], "status": "in_progress"}, out)
            self._open_type = "reasoning"
        assert self._open is not None
        self.response["output"][self._open]["encrypted_content"] = token
        self._close(out)

    # -- events ----------------------------------------------------------------------------
    def feed(self, event: LoopEvent) -> Batch:
        out: Batch = []
        # Exact classes (none of them is subclassed): ``is`` costs less than an ``isinstance`` call.
        items: Any = event if event.__class__ is list else (event,)
        for item in items:
            cls = item.__class__
            if cls is TextDelta:
                self._text(item.text, out)
            elif cls is Finished:
                self._finish(item.result, out)
            elif cls is Answering:
                self.response["model"] = item.model
            elif cls is ReasoningDelta:
                self._reasoning(item.text, out)
            elif cls is HostedToolCall:
                self._close(out)
                self._hosted(item, out)
            elif cls is TurnArtifacts:
                self._carry(item, out)
            elif cls is ToolStarted:
                self._close(out)
                self.final_text = []
                call = {"id": f"mcp_{item.tool_call_id}", "type": "mcp_call", "server_label": self.label_of(item.name),
                        "name": item.name, "arguments": item.arguments, "status": "in_progress"}
                if item.tool_call_id in self.approved:
                    call["approval_request_id"] = f"mcpr_{item.tool_call_id}"
                index = self._add(call, out)
                self._tools[item.tool_call_id] = index
                if self.emit:
                    out.append(self._event("response.mcp_call_arguments.done", {"item_id": call["id"],
                                                                                "output_index": index,
                                                                                "arguments": item.arguments}))
                    out.append(self._event("response.mcp_call.in_progress", {"item_id": call["id"],
                                                                             "output_index": index}))
            elif cls is ToolProgress:
                index = self._tools.get(item.tool_call_id, -1)
                if self.emit and index >= 0:  # the call's item again in progress, with what the server said
                    out.append(self._event("response.mcp_call.in_progress", {
                        "item_id": self.response["output"][index]["id"], "output_index": index,
                        "progress": item.detail()}))
            elif cls is ToolFinished:
                index = self._tools.pop(item.tool_call_id)
                call = self.response["output"][index]
                if item.status == "ok":
                    call.update(output=item.content, status="completed")
                    if self.emit:
                        out.append(self._event("response.mcp_call.completed", {"item_id": call["id"],
                                                                               "output_index": index}))
                else:
                    call.update(error={"type": "mcp_tool_execution_error", "content": item.content}, status="failed")
                    if self.emit:
                        out.append(self._event("response.mcp_call.failed", {"item_id": call["id"],
                                                                            "output_index": index}))
                self._done(index, out)
        return out

    def _finish(self, result: LoopResult, out: Batch) -> None:
        self._close(out)
        self.result = result
        response = self.response
        if result.status == "paused":
            reasons = {p["tool_call_id"]: p["reason"] for p in result.gateway.get("pending", ())}
            for call in result.tool_calls:
                function = call["function"]
                if reasons.get(call["id"]) == "elicitation":
                    continue  # a server call asking the user: answered in the inbox or by a decision, not an item
                if reasons.get(call["id"]) == "approval":
                    index = self._add({"id": f"mcpr_{call['id']}", "type": "mcp_approval_request",
                                       "server_label": self.label_of(function["name"]), "name": function["name"],
                                       "arguments": function["arguments"]}, out)
                else:
                    index = self._client_call(call, out)
                self._done(index, out)
        if result.model:
            response["model"] = result.model
        if result.finish_reason == "length" and result.status == "completed":
            response["status"] = "incomplete"
            response["incomplete_details"] = {"reason": "max_output_tokens"}
        else:
            response["status"] = "completed"
            response["completed_at"] = int(time.time())
        response["usage"] = usage_object(result.usage)
        response["gateway"] = {"route": self.route, **result.gateway}
        if self.hosted_drops or self.notes or self.carrier is not None:
            self.warn(response["gateway"], [*self.notes, *(self.carrier.warnings() if self.carrier else ())])
        self.done = True
        if self.frames or self.socket:  # framed by the run once the record is written (``terminal_frame``)
            self._seq += 1
            out.append(TERMINAL)
        elif self.emit:
            out.append(self._event(f"response.{response['status']}", {"response": response}))
        else:
            self._seq += 1
            out.append(SILENT)  # what ``retract_terminal`` takes back

    def retract_terminal(self, events: Batch) -> None:
        """Take back the terminal event just built (not sent): recording the response failed, ``fail`` follows."""
        if self.done and events and self.response["status"] in ("completed", "incomplete"):
            events.pop()
            self._seq -= 1
            self.done = False
            self.response["incomplete_details"] = None
            self.response["completed_at"] = None

    def fail(self, error: GatewayError) -> Batch:
        """After a failure once the response started: close what is open, end with ``response.failed``."""
        out: Batch = []
        self._close(out, "incomplete")
        for index in self._tools.values():
            self.response["output"][index]["status"] = "incomplete"
            self._done(index, out)
        self._tools = {}
        response = self.response
        response["status"] = "failed"
        response["error"] = {"code": "server_error", "message": error.message}
        response["gateway"] = {"route": self.route, "status": "failed", "error": error.payload()["error"]}
        self.done = True
        if self.frames:
            self._seq += 1
            out.append(self.terminal_frame(None))
        else:
            out.append(self._event("response.failed", {"response": response}))
        return out


class ResponseRecorder:
    """A resume's stored result on the Responses surface: the final Response object of the same events.

    A builder of its own (no events built), with the answering builder's id and ``created_at``, so
    the stored body is the Response the decider received (``GET /v1/responses/{id}`` returns it too).
    """

    __slots__ = ("builder",)

    def __init__(self, answering: ResponseBuilder, echo: dict[str, Any]) -> None:
        response = answering.response
        self.builder = ResponseBuilder(answering.id, answering.route, echo, answering.label_of, answering.approved,
                                       created_at=response["created_at"], emit=False)
        # The answering builder's item-id base, counted from 0 again: the same events name the same items.
        self.builder._items = (answering._items[0], itertools.count())
        self.builder.names, self.builder.hosted_drops = answering.names, answering.hosted_drops
        self.builder.sources = answering.sources
        self.builder.carrier, self.builder.notes = answering.carrier, answering.notes
        self.builder.start()

    def feed(self, event: LoopEvent) -> None:
        self.builder.feed(event)

    def result(self) -> tuple[str, str, bytes]:
        return self.builder.id, "response", orjson.dumps(self.builder.response)
